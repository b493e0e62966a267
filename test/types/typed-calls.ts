/**
 * Compile-time test (`npm run typecheck` compiles it; nothing runs it): with the effects typed,
 * a misspelled effect name or a wrong input in `runSideEffect`, `sideEffects` and the proxy is a
 * type error, while untyped calls keep compiling as before. Each `@ts-expect-error` fails the typecheck if
 * its line compiles.
 */
import { defineEffect } from '../../src/activities/index.js';
import { proxySideEffects, runSideEffect, sideEffects } from '../../src/workflows/index.js';

const effects = {
  email: defineEffect({
    resource: (input: { to: string }) => `inbox:${input.to}`,
    apply: async (input: { to: string }) => ({ messageId: input.to }),
  }),
  charge: defineEffect({
    resource: (input: { card: string; cents: number }) => `card:${input.card}`,
    apply: async () => ({ receipt: 'r' }),
  }),
};
type Effects = typeof effects;

/** An interface of `apply` shapes, as a workflow that cannot import the effects writes it. */
interface DeclaredEffects {
  email: { apply(input: { to: string }): Promise<{ messageId: string }> };
}

export async function typed(): Promise<void> {
  // The name and input are checked; the result is the union of the effects' results.
  const ran = await runSideEffect<Effects>('charge', { card: 'c', cents: 1 });
  const ranResult: { messageId: string } | { receipt: string } = ran.result;
  const how: 'applied' | 'replayed' | 'reconciled' = ran.outcome;
  await runSideEffect<DeclaredEffects>('email', { to: 'a' }, { step: 'welcome' });
  // @ts-expect-error misspelled effect name
  await runSideEffect<Effects>('emial', { to: 'a' });
  // @ts-expect-error wrong input
  await runSideEffect<Effects>('email', { nope: true });
  // @ts-expect-error the input of another effect
  await runSideEffect<Effects>('email', { card: 'c', cents: 1 });
  // @ts-expect-error wrong input, declared effects
  await runSideEffect<DeclaredEffects>('email', { nope: true });
  // @ts-expect-error no input
  await runSideEffect<Effects>('email');
  void ranResult;
  void how;

  const settled = await sideEffects<Effects>(
    [
      { effect: 'email', input: { to: 'a' } },
      { effect: 'charge', input: { card: 'c', cents: 1 }, step: 'deposit' },
    ],
    { limit: 2 },
  );
  const first = settled[0];
  if (first?.status === 'fulfilled') {
    const result: { messageId: string } | { receipt: string } = first.value.result;
    void result;
  }
  // @ts-expect-error misspelled effect name
  await sideEffects<Effects>([{ effect: 'emial', input: { to: 'a' } }], { limit: 1 });
  // @ts-expect-error the input of another effect
  await sideEffects<Effects>([{ effect: 'email', input: { card: 'c', cents: 1 } }], { limit: 1 });
  // @ts-expect-error wrong input, declared effects
  await sideEffects<DeclaredEffects>([{ effect: 'email', input: { nope: true } }], { limit: 1 });

  const { email } = proxySideEffects<Effects>();
  const exact: { messageId: string } = await email({ to: 'a' });
  // @ts-expect-error wrong input through the proxy
  await email({ nope: true });
  void exact;
}

export async function untyped(): Promise<void> {
  // Without the effects' type, names and inputs are the caller's word, as before.
  const receipt: { receipt: string } = (await runSideEffect<{ receipt: string }>('charge', {}))
    .result;
  await runSideEffect<string, { to: string }>('email', { to: 'a' });
  const ran: { receipt: string } = (await runSideEffect<{ receipt: string }>('charge', {})).result;
  const name: string = 'chosen at run time';
  await runSideEffect(name, { at: 'all' });
  await sideEffects([{ effect: 'anything', input: 1 }], { limit: 1 });
  await sideEffects<{ receipt: string }>([{ effect: 'charge', input: {} }], { limit: 1 });
  void receipt;
  void ran;
}
