/** Starts what the suites share before any test file runs. */
export default async function setup(): Promise<void> {}
