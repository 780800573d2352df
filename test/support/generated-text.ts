/**
 * A text corpus for the transformer tests: bytes from a tiny grammar (words drawn from a short list), so
 * each byte is predictable from its context, and the text's unigram entropy, the best loss a model
 * without context can reach.
 */
import { mulberry32 } from './rng';

/** `bytes` bytes of words drawn (seeded by `seed`) from a short list. */
export function generatedText(seed: number, bytes: number): Uint8Array {
  const words = ['the ', 'cat ', 'sat ', 'on ', 'a ', 'mat. ', 'dog ', 'ran ', 'far ', 'away. '];
  const rand = mulberry32(seed);
  let s = '';
  while (s.length < bytes) s += words[Math.floor(rand() * words.length)];
  return new TextEncoder().encode(s.slice(0, bytes));
}

/** Entropy in bits per byte of the text's byte frequencies. */
export function unigramBits(text: Uint8Array): number {
  const counts = new Array(256).fill(0);
  for (const b of text) counts[b]++;
  return -counts.reduce((h, c) => (c ? h + (c / text.length) * Math.log2(c / text.length) : h), 0);
}
