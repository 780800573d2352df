/**
 * Reading one control frame (either direction): a size cap first, then JSON, the protocol version and
 * the message's schema, each failure with its own `ParseErrorCode` (the coordinator answers a tab's bad
 * frame with an `error` of that code).
 */
import type { z } from 'zod';
import { PROTOCOL_VERSION } from './control-fields';
import { type ServerMessage, serverMessageSchema } from './coordinator-messages';
import { type ClientMessage, clientMessageSchema } from './tab-messages';

/** Largest accepted control frame, in UTF-8 bytes. Control messages are small; bulk data goes elsewhere. */
export const MAX_CONTROL_MESSAGE_BYTES = 16 * 1024;

/** Why a frame was not a message. */
export type ParseErrorCode = 'too_large' | 'bad_json' | 'bad_message' | 'bad_version';
export type ParseResult<M> = { ok: true; msg: M } | { ok: false; code: ParseErrorCode; message: string };

/** UTF-8 byte length of a string (no TextEncoder: the core has no DOM/Node types). */
export function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

function parseWith<M>(schema: z.ZodType<M>, text: string, maxBytes: number): ParseResult<M> {
  // Cheap bounds first: a UTF-16 unit is 1..3 UTF-8 bytes.
  if (text.length > maxBytes || (text.length * 3 > maxBytes && utf8Length(text) > maxBytes)) {
    return { ok: false, code: 'too_large', message: `frame larger than ${maxBytes} bytes` };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { ok: false, code: 'bad_json', message: `not JSON: ${(err as Error).message}`.slice(0, 200) };
  }
  if (
    raw !== null &&
    typeof raw === 'object' &&
    !Array.isArray(raw) &&
    'v' in raw &&
    (raw as { v: unknown }).v !== PROTOCOL_VERSION
  ) {
    return {
      ok: false,
      code: 'bad_version',
      message: `protocol version ${JSON.stringify((raw as { v: unknown }).v).slice(0, 20)}, expected ${PROTOCOL_VERSION}`,
    };
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const detail = parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`)
      .join('; ');
    return { ok: false, code: 'bad_message', message: detail.slice(0, 500) };
  }
  return { ok: true, msg: parsed.data };
}

/** Parse and validate one frame from a tab. */
export function parseClientMessage(text: string, maxBytes = MAX_CONTROL_MESSAGE_BYTES): ParseResult<ClientMessage> {
  return parseWith(clientMessageSchema, text, maxBytes);
}

/** Parse and validate one frame from the coordinator (used by the tabs). */
export function parseServerMessage(text: string, maxBytes = 1024 * 1024): ParseResult<ServerMessage> {
  return parseWith(serverMessageSchema, text, maxBytes);
}
