/**
 * The workflow patches a history took, read from its `core_patch` markers: how a test tells a run
 * that took this release's patches from one held to an earlier release's commands.
 */

interface MarkerEvent {
  markerRecordedEventAttributes?: {
    markerName?: string | null;
    details?: Record<
      string,
      { payloads?: Array<{ data?: Uint8Array | string | null }> | null }
    > | null;
  } | null;
}

/**
 * The patch ids whose markers `history` records, in order. Takes a fetched history (payload data
 * as bytes) and a recorded JSON file (the same data in base64) alike.
 */
export function patchesIn(history: unknown): string[] {
  return ((history as { events?: MarkerEvent[] }).events ?? []).flatMap((event) => {
    const marker = event.markerRecordedEventAttributes;
    if (marker?.markerName !== 'core_patch') return [];
    const data = marker.details?.['patch-data']?.payloads?.[0]?.data;
    if (!data) return [];
    const bytes = typeof data === 'string' ? Buffer.from(data, 'base64') : Buffer.from(data);
    return [(JSON.parse(bytes.toString('utf8')) as { id: string }).id];
  });
}
