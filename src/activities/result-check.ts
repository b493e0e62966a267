import type { AnyEffect } from './effect.js';

/**
 * The part of the Standard Schema interface (https://standardschema.dev) a result check reads:
 * zod, valibot, arktype and others implement it, so an effect can hand over its schema without
 * this library depending on any one of them.
 */
interface StandardSchemaLike {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    validate(value: unknown): StandardSchemaResult | Promise<StandardSchemaResult>;
  };
}

/** What a Standard Schema's `validate` answers: the value, or why not. */
type StandardSchemaResult =
  | { readonly value: unknown; readonly issues?: undefined }
  | {
      readonly issues: ReadonlyArray<{
        readonly message: string;
        readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>;
      }>;
    };

/**
 * How an effect's result is checked when someone other than its apply declares it (a person's
 * verdict, a probe's answer): `'void'` (the effect returns nothing: only `null` or no result is
 * accepted), a Standard Schema value, or a function that answers `true`/`undefined` for a valid
 * result and `false` or a reason for an invalid one (a thrown error's message is the reason too).
 * Without it, the typed caller of an effect could be handed `null` or a wrong shape it then fails
 * on forever, since the first verdict wins.
 */
export type ResultCheck =
  | 'void'
  | StandardSchemaLike
  | ((result: unknown) => boolean | string | undefined);

/** Why `result` does not pass the effect's declared check, or undefined (also when it declares none). */
export async function resultError(
  effect: AnyEffect | undefined,
  result: unknown,
): Promise<string | undefined> {
  const check = effect?.result;
  if (check === undefined) return undefined;
  if (check === 'void')
    return result === null || result === undefined
      ? undefined
      : `the effect returns nothing (result: 'void'), got ${shapeOf(result)}`;
  try {
    if (typeof check === 'function') {
      const answer = check(result);
      if (answer === true || answer === undefined) return undefined;
      return typeof answer === 'string' && answer.length > 0
        ? answer
        : `${shapeOf(result)} does not pass the effect's result check`;
    }
    const answer = await check['~standard'].validate(result);
    if (!answer.issues) return undefined;
    return answer.issues.map(issueText).join('; ') || "refused by the effect's result schema";
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

/**
 * Why a person's `applied` verdict (signal, Update, UI, CLI, batch, held in the store) cannot be
 * recorded with `result`, or undefined. Stricter than {@link resultError}: a verdict without a
 * result (absent or `null`) is refused unless the effect declares `result: 'void'` or a check that
 * accepts it, since a caller typed for a result would otherwise fail on `null` forever (the
 * first verdict wins). `effect` undefined is an effect this worker does not know: it declares
 * nothing, so only a verdict with a result passes.
 */
export async function verdictResultError(
  name: string | undefined,
  effect: AnyEffect | undefined,
  result: unknown,
): Promise<string | undefined> {
  const check = effect?.result;
  if ((result === null || result === undefined) && check === undefined)
    return name !== undefined && effect !== undefined
      ? `applied without a result: effect "${name}" declares no result check, so its callers expect what it returned; send that as "result" (or declare result: 'void' on an effect that returns nothing)`
      : 'applied without a result: the effect is not known here, so its callers may expect a result; send what it returned as "result"';
  const error = await resultError(effect, result);
  return error === undefined ? undefined : `result refused by effect "${name}": ${error}`;
}

function issueText(issue: {
  message: string;
  path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }>;
}): string {
  const path = (issue.path ?? [])
    .map((part) => String(typeof part === 'object' ? part.key : part))
    .join('.');
  return path ? `${path}: ${issue.message}` : issue.message;
}

/**
 * What a refused result looks like, never what it holds: the refusal is kept in the reconcile's
 * `status`, logged, and sent back as a failure message, and a result can carry what a codec
 * exists to hide (a card number, a name).
 */
function shapeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === 'object') {
    const fields = Object.keys(value as object);
    const named = fields.slice(0, 10).join(', ');
    return fields.length === 0
      ? 'an empty object'
      : `an object with field(s) ${named}${fields.length > 10 ? ', ...' : ''}`;
  }
  if (typeof value === 'string') return `a string of ${value.length} characters`;
  return `a ${typeof value}`;
}
