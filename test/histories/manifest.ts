/** The index of one release's recorded histories (test/histories/<version>/manifest.json). */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export interface HistoryEntry {
  /** The history's JSON file, as `historyToJSON` writes it (the UI's "Download" format). */
  file: string;
  workflowType: string;
  workflowId: string;
  description: string;
}

export interface Manifest {
  version: string;
  recordedAt: string;
  histories: HistoryEntry[];
}

export const HISTORIES_DIR = path.dirname(fileURLToPath(import.meta.url));

/** Every release folder's manifest, oldest release first. */
export async function releasedManifests(): Promise<Array<Manifest & { dir: string }>> {
  const folders = (await readdir(HISTORIES_DIR, { withFileTypes: true }))
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name)
    .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  return Promise.all(
    folders.map(async (folder) => {
      const dir = path.join(HISTORIES_DIR, folder);
      const manifest = JSON.parse(
        await readFile(path.join(dir, 'manifest.json'), 'utf8'),
      ) as Manifest;
      return { ...manifest, dir };
    }),
  );
}
