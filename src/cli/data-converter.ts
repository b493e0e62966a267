import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { DataConverter } from '@temporalio/client';
import { UsageError } from './usage.js';

/**
 * Loads the app's data converter from a module (`--data-converter` or
 * `SIDEEFFECT_DATA_CONVERTER`): its `dataConverter` export, else its default export, the same
 * object the app gives its Client and Worker. Without it, the CLI cannot read what an
 * encryption codec wrote (`Unknown encoding: binary/encrypted`) and sends verdicts in plain text.
 * A relative `modulePath` is read from `cwd`.
 */
export async function loadDataConverter(modulePath: string, cwd: string): Promise<DataConverter> {
  let loaded: { dataConverter?: unknown; default?: unknown };
  try {
    loaded = await import(pathToFileURL(path.resolve(cwd, modulePath)).href);
  } catch (error) {
    throw new UsageError(
      `cannot load the data converter module ${modulePath}: ${(error as Error).message}`,
    );
  }
  const converter = loaded.dataConverter ?? loaded.default;
  if (!isDataConverter(converter))
    throw new UsageError(
      `${modulePath} exports no data converter: export const dataConverter = { payloadCodecs: [...] }`,
    );
  return converter;
}

function isDataConverter(value: unknown): value is DataConverter {
  if (typeof value !== 'object' || value === null) return false;
  const { payloadCodecs, payloadConverterPath, failureConverterPath } = value as DataConverter;
  return (
    (payloadCodecs === undefined || Array.isArray(payloadCodecs)) &&
    (payloadConverterPath === undefined || typeof payloadConverterPath === 'string') &&
    (failureConverterPath === undefined || typeof failureConverterPath === 'string')
  );
}
