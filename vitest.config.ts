import { defineConfig } from 'vitest/config';

/**
 * Tests that need neither Postgres, nor Temporal, nor a browser: `npm run test:unit` runs only
 * these, without the global setup, so a contributor gets an answer in seconds. A new test file
 * that needs no service belongs here (or under test/unit/).
 */
const unit = [
  'test/unit/**/*.test.ts',
  'test/syncx/**/*.test.ts',
  'test/core/**/*.test.ts',
  'test/store/memory.test.ts',
  'test/cli/args.test.ts',
  'test/docs/**/*.test.ts',
];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 180_000,
    pool: 'forks',
    reporters: ['default'],
    projects: [
      { extends: true, test: { name: 'unit', include: unit } },
      {
        extends: true,
        test: {
          name: 'services',
          include: ['test/**/*.test.ts'],
          exclude: unit,
          globalSetup: ['test/support/global-setup.ts'],
        },
      },
    ],
  },
});
