// A CommonJS consumer: require() of every entry point of the ESM-only package (require(esm)),
// and one guarded action run through them.
const assert = require('node:assert/strict');
const { MemoryStore, Runner } = require('sideeffect');
const { defineEffect } = require('sideeffect/activities');
const { PgStore, migrate } = require('sideeffect/postgres');
const { settleAll } = require('sideeffect/syncx');
const { SideEffectPlugin, clusterSettings } = require('sideeffect/worker');
const { proxySideEffects, ReconcileWorkflow } = require('sideeffect/workflows');

(async () => {
  for (const exported of [
    defineEffect,
    PgStore,
    migrate,
    settleAll,
    SideEffectPlugin,
    proxySideEffects,
    ReconcileWorkflow,
  ])
    assert.equal(typeof exported, 'function');
  assert.equal(
    clusterSettings({ env: { TEMPORAL_ADDRESS: 'example:7233' } }).connectionOptions.address,
    'example:7233',
  );
  const runner = new Runner(new MemoryStore(), { ttlMs: 1_000 });
  const action = { key: 'cjs/1', resource: 'r' };
  let applied = 0;
  const apply = async () => {
    applied += 1;
    return { payload: new TextEncoder().encode('ok') };
  };
  const first = await runner.execute(action, apply);
  const second = await runner.execute(action, apply);
  process.stdout.write(
    `${JSON.stringify({ first: first.outcome, second: second.outcome, applied })}\n`,
  );
})().catch((error) => {
  process.stderr.write(`${error.stack}\n`);
  process.exit(1);
});
