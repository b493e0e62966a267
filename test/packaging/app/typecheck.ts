// Type-checked against the scratch app's own SDK copy: the app's Client must be accepted where the
// library takes it, beside the app's NativeConnection on its Worker (two SDK copies made this TS2322).
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { MemoryStore } from 'sideeffect';
import { SideEffectPlugin } from 'sideeffect/worker';

export async function typed(): Promise<void> {
  const connection = await NativeConnection.connect({});
  const client = new Client({ connection: await Connection.connect({}) });
  const options = { store: new MemoryStore(), effects: {}, ttlMs: 1_000, client };
  await Worker.create({ connection, taskQueue: 'q', plugins: [new SideEffectPlugin(options)] });
}
