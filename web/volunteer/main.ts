// volunteer page
