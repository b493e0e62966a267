/**
 * The CLI's registry: each command declares its options, usage and handler once
 * (src/cli/commands/), and everything a person reads about it comes from that declaration. A new
 * command or option that leaves part of it out, or that the help and the typo hints miss, fails
 * here.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { COMMANDS, help } from '../../src/cli/commands/index.js';
import { environment } from '../../src/cli/environment.js';
import { GLOBAL_OPTIONS } from '../../src/cli/global-options.js';
import { optionLabel } from '../../src/cli/help.js';
import { main } from '../../src/cli/main.js';
import { REPO_ROOT } from '../support/temporal.js';

async function cli(argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const env = {
    ...environment({}),
    database: { connectionString: 'postgres://nobody@127.0.0.1:1/none' },
  };
  const code = await main(argv, { out: (l) => out.push(l), err: (l) => err.push(l) }, env);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/** `name` with two neighbouring letters swapped: the commonest typo, one edit away. */
function typo(name: string): string {
  const at = Math.floor(name.length / 2);
  const swapped = `${name.slice(0, at - 1)}${name[at]}${name[at - 1]}${name.slice(at + 1)}`;
  return swapped === name ? `${name}x` : swapped;
}

describe('the CLI command registry', () => {
  it('every command has a name, a summary, usage lines, a text, and every option a description', () => {
    const names = COMMANDS.map((command) => command.name);
    expect(new Set(names).size).toBe(names.length);
    for (const command of COMMANDS) {
      expect(command.name, command.name).toMatch(/^[a-z][a-z-]*$/);
      expect(command.summary.trim(), command.name).not.toBe('');
      expect(command.about.trim(), command.name).not.toBe('');
      expect(command.usage.length, command.name).toBeGreaterThan(0);
      for (const line of command.usage)
        expect(line, command.name).toMatch(new RegExp(`^sideeffect ${command.name}\\b`));
      if (command.argument) {
        expect(command.usage.join('\n'), command.name).toContain(`<${command.argument.name}>`);
        expect(command.argument.description.trim(), command.name).not.toBe('');
      }
      for (const [name, spec] of Object.entries(command.options)) {
        expect(name, command.name).toMatch(/^[a-z][a-z-]*$/);
        expect(spec.description.trim(), `${command.name} --${name}`).not.toBe('');
        if (spec.type === 'string') expect(spec.arg, `${command.name} --${name}`).toBeTruthy();
      }
    }
    for (const [name, spec] of Object.entries(GLOBAL_OPTIONS))
      expect(spec.description.trim(), `--${name}`).not.toBe('');
  });

  it('an option means the same in every command that takes it: one line is read for all', () => {
    const seen = new Map<string, string>();
    const shorts = new Map<string, string>();
    for (const options of [GLOBAL_OPTIONS, ...COMMANDS.map((command) => command.options)]) {
      for (const [name, spec] of Object.entries(options)) {
        const shape = JSON.stringify([spec.type, spec.short, spec.multiple]);
        expect(seen.get(name) ?? shape, `--${name}`).toBe(shape);
        seen.set(name, shape);
        if (spec.short === undefined) continue;
        expect(shorts.get(spec.short) ?? name, `-${spec.short}`).toBe(name);
        shorts.set(spec.short, name);
      }
    }
  });

  it('help <command> prints every option the command takes, and the summary list names every command', async () => {
    for (const command of COMMANDS) {
      const shown = await cli(['help', command.name]);
      expect(shown.code, command.name).toBe(0);
      expect(shown.out, command.name).toBe(help(command.name));
      for (const [name, spec] of Object.entries(command.options))
        expect(shown.out, `${command.name} --${name}`).toContain(optionLabel(name, spec));
      if (command.argument) expect(shown.out, command.name).toContain(command.argument.description);
    }
    const main = await cli(['help']);
    for (const command of COMMANDS)
      expect(main.out).toMatch(new RegExp(`^  ${command.name} `, 'm'));
    for (const [name, spec] of Object.entries(GLOBAL_OPTIONS))
      expect(main.out, `--${name}`).toContain(optionLabel(name, spec));
  });

  it('a mistyped option of any command is refused with the option it meant (exit 2)', async () => {
    for (const command of COMMANDS) {
      for (const name of Object.keys(command.options).filter((option) => option.length >= 4)) {
        const wrong = typo(name);
        const ran = await cli([command.name, `--${wrong}`]);
        expect(ran.code, `${command.name} --${wrong}`).toBe(2);
        expect(ran.err.split('\n')[0], `${command.name} --${wrong}`).toBe(
          `sideeffect: unknown option --${wrong}; did you mean --${name}?`,
        );
        expect(ran.err, command.name).toContain(`see: sideeffect help ${command.name}`);
      }
    }
  });

  it('the CLI sources import no cycle, and reach the store only through its two entries', () => {
    const root = path.join(REPO_ROOT, 'src/cli');
    const files = readdirSync(root, { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts'))
      .map((file) => path.join(root, file));
    const imports = new Map(
      files.map((file) => [
        file,
        [...readFileSync(file, 'utf8').matchAll(/(?:from|import) '(\.[^']+)\.js'/g)].map((m) =>
          path.resolve(path.dirname(file), `${m[1]}.ts`),
        ),
      ]),
    );
    const store = path.join(REPO_ROOT, 'src/store/');
    for (const [file, targets] of imports)
      for (const target of targets.filter((t) => t.startsWith(store)))
        expect(['postgres/index.ts', 'postgres/admin.ts'], path.relative(root, file)).toContain(
          path.relative(store, target),
        );
    const done = new Set<string>();
    const visit = (file: string, trail: string[]) => {
      if (trail.includes(file))
        throw new Error(
          `import cycle: ${[...trail, file].map((f) => path.relative(root, f)).join(' -> ')}`,
        );
      if (done.has(file)) return;
      for (const target of imports.get(file) ?? []) visit(target, [...trail, file]);
      done.add(file);
    };
    for (const file of files) visit(file, []);
  });
});
