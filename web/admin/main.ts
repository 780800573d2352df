// admin page: see issue 6
