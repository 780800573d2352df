import { describe, expect, it } from 'vitest';
import { iceErrorText, selectedPairTypes } from '../../../../web/net/ice-path';

/** A getStats report as Chromium shapes it (only the fields read). */
function report(entries: Record<string, Record<string, unknown>>) {
  return new Map(Object.entries(entries));
}

describe('selected candidate pair types from getStats', () => {
  const candidates = {
    L1: { type: 'local-candidate', candidateType: 'host' },
    L2: { type: 'local-candidate', candidateType: 'relay' },
    R1: { type: 'remote-candidate', candidateType: 'srflx' },
    R2: { type: 'remote-candidate', candidateType: 'prflx' },
  };
  it('follows the transport selectedCandidatePairId, not another succeeded pair', () => {
    const stats = report({
      ...candidates,
      P1: {
        type: 'candidate-pair',
        state: 'succeeded',
        nominated: true,
        localCandidateId: 'L1',
        remoteCandidateId: 'R1',
      },
      P2: {
        type: 'candidate-pair',
        state: 'succeeded',
        nominated: true,
        localCandidateId: 'L2',
        remoteCandidateId: 'R2',
      },
      T: { type: 'transport', selectedCandidatePairId: 'P2' },
    });
    expect(selectedPairTypes(stats)).toEqual({ local: 'relay', remote: 'prflx' });
  });
  it('falls back to a nominated succeeded pair; null while nothing is selected or types are unknown', () => {
    const pair = {
      type: 'candidate-pair',
      state: 'succeeded',
      nominated: true,
      localCandidateId: 'L1',
      remoteCandidateId: 'R1',
    };
    expect(selectedPairTypes(report({ ...candidates, P1: pair }))).toEqual({ local: 'host', remote: 'srflx' });
    expect(selectedPairTypes(report({ ...candidates, P1: { ...pair, state: 'in-progress' } }))).toBeNull();
    expect(selectedPairTypes(report({ P1: pair, L1: { candidateType: 'bogus' }, R1: candidates.R1 }))).toBeNull();
  });
});

describe('ICE candidate errors in words', () => {
  it('401 is an authentication failure naming the server', () => {
    expect(iceErrorText(401, 'turn:203.0.113.2:3478?transport=udp')).toBe(
      'TURN authentication failed (401 Unauthorized at turn:203.0.113.2:3478?transport=udp): wrong or expired credentials',
    );
    expect(iceErrorText(701, 'stun:x:3478')).toMatch(/unreachable at stun:x:3478/);
    expect(iceErrorText(500, '', 'Server Error')).toBe('ICE server error 500: Server Error');
  });
});
