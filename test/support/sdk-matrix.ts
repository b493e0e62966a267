/**
 * The SDK releases the library is tested on, tied to package.json's peer range: the oldest and the
 * newest published patch of every minor the range admits (test/unit/sdk-range.test.ts checks it
 * against {@link PUBLISHED}). `npm test` runs the first and the last of test/e2e/sdk-matrix.test.ts,
 * `npm run test:long` all of them.
 */
export const SDK_MATRIX: readonly { sdk: string; envconfig: string }[] = [
  { sdk: '1.15.1', envconfig: '1.15.0' },
  { sdk: '1.16.3', envconfig: '1.16.1' },
  { sdk: '1.17.5', envconfig: '1.16.1' },
  { sdk: '1.18.2', envconfig: '1.18.2' },
  { sdk: '1.20.1', envconfig: '1.18.2' },
  { sdk: '1.20.3', envconfig: '1.20.3' },
  { sdk: '1.21.0', envconfig: '1.20.3' },
  { sdk: '1.21.1', envconfig: '1.20.3' },
  { sdk: '1.22.0', envconfig: '1.22.0' },
  { sdk: '1.23.0', envconfig: '1.23.0' },
  { sdk: '1.24.0', envconfig: '1.24.0' },
];

/**
 * `@temporalio/worker` releases from 1.15.0 on, as npm listed them on 2026-12-01
 * (`npm view @temporalio/worker versions`). 1.19.1 and 1.20.0 cannot be installed: the
 * @temporalio/activity and client releases they depend on were never published.
 */
export const PUBLISHED = [
  '1.15.0',
  '1.15.1',
  '1.16.0',
  '1.16.1',
  '1.16.2',
  '1.16.3',
  '1.17.0',
  '1.17.1',
  '1.17.2',
  '1.17.3',
  '1.17.4',
  '1.17.5',
  '1.18.0',
  '1.18.1',
  '1.18.2',
  '1.19.0',
  '1.19.1',
  '1.20.0',
  '1.20.1',
  '1.20.2',
  '1.20.3',
  '1.21.0',
  '1.21.1',
  '1.22.0',
  '1.23.0',
  '1.24.0',
] as const;

/** Published, yet not installable as a set (see {@link PUBLISHED}). */
export const UNINSTALLABLE = ['1.19.1', '1.20.0'];

/** A release whose bundler lacks the webpack fix, for the refusal test, and the fix it must name. */
export const UNFIXED = { sdk: '1.17.4', envconfig: '1.16.1', fixedIn: '1.17.5' } as const;

/**
 * Whether `version` satisfies `range`, for the range syntax package.json uses here: `||` of
 * space-separated `>=X.Y.Z` and `<X.Y.Z` comparators.
 */
export function satisfies(version: string, range: string): boolean {
  const parse = (v: string) => v.split('.').map(Number) as [number, number, number];
  const compare = (a: string, b: string) => {
    const [x, y] = [parse(a), parse(b)];
    for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
    return 0;
  };
  return range.split('||').some((set) =>
    set
      .trim()
      .split(/\s+/)
      .every((comparator) => {
        const match = /^(>=|<)(\d+\.\d+\.\d+)$/.exec(comparator);
        if (!match) throw new Error(`unsupported comparator ${comparator} in ${range}`);
        const order = compare(version, match[2]!);
        return match[1] === '>=' ? order >= 0 : order < 0;
      }),
  );
}
