/**
 * The public surface of every package entry point as text: each export with its kind and type,
 * interfaces with their own members, and `(deprecated)` after every deprecated export or member. The API test compares it with api-report.md, so a change to
 * the surface (a new export, a renamed option, a wider type) shows up in review as a diff of that
 * file. Built with the TypeScript compiler, from src/, so it needs no build.
 */
import path from 'node:path';
import ts from 'typescript';

/** package.json `exports` subpath -> its source entry. */
export const ENTRY_POINTS: Record<string, string> = {
  sideeffect: 'src/index.ts',
  'sideeffect/store': 'src/store/index.ts',
  'sideeffect/postgres': 'src/store/postgres/index.ts',
  'sideeffect/activities': 'src/activities/index.ts',
  'sideeffect/workflows': 'src/workflows/index.ts',
  'sideeffect/worker': 'src/worker/index.ts',
  'sideeffect/syncx': 'src/syncx/index.ts',
  'sideeffect/testing': 'src/testing/index.ts',
};

const FORMAT =
  ts.TypeFormatFlags.NoTruncation |
  ts.TypeFormatFlags.UseSingleQuotesForStringLiteralType |
  ts.TypeFormatFlags.WriteArrowStyleSignature;

/**
 * The report, the names each entry point exports, and the optional members of exported
 * `*Options` interfaces without a `@default`.
 */
export interface ApiReport {
  text: string;
  names: Record<string, string[]>;
  undocumentedDefaults: string[];
}

export function apiReport(root: string): ApiReport {
  const files = Object.values(ENTRY_POINTS).map((file) => path.join(root, file));
  const config = ts.getParsedCommandLineOfConfigFile(
    path.join(root, 'tsconfig.build.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  if (!config) throw new Error('tsconfig.build.json does not parse');
  const program = ts.createProgram(files, { ...config.options, noEmit: true });
  const checker = program.getTypeChecker();
  const src = path.join(root, 'src') + path.sep;
  // `import("/abs/node_modules/pg/index").Pool` -> `Pool`: the report must not depend on the machine.
  const portable = (typeText: string) => typeText.replace(/import\("[^"]*"\)\./g, '');
  const text = (type: ts.Type, at: ts.Node) => portable(checker.typeToString(type, at, FORMAT));
  /**
   * A member's type; where the checker resolves it to `any` but the declaration names a type
   * (`recheckEvery?: Duration`, whose `ms` types NodeNext resolution cannot load), the type as
   * written, which is what the .d.ts says: a change to it must show in review, not hide as `any`.
   */
  const memberType = (member: ts.Symbol, at: ts.Declaration) => {
    const type = checker.getTypeOfSymbolAtLocation(member, at);
    const written = (at as { type?: ts.TypeNode }).type;
    if (!(type.flags & ts.TypeFlags.Any) || !written || written.kind === ts.SyntaxKind.AnyKeyword)
      return text(type, at);
    return written.getText().replace(/\s+/g, ' ');
  };
  const undocumentedDefaults = new Set<string>();
  const isDeprecated = (at: ts.Node) =>
    ts.getJSDocTags(at).some((tag) => tag.tagName.text === 'deprecated');

  const describe = (name: string, exported: ts.Symbol): string[] => {
    const symbol =
      exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    const declaration = symbol.declarations?.[0];
    if (!declaration) return [`${name}: (no declaration)`];
    const lines: string[] = [];
    const mark = isDeprecated(declaration) ? ' (deprecated)' : '';
    /** A member's name, marked when the member itself is deprecated (a renamed field or method). */
    const memberName = (member: ts.Symbol, at: ts.Node) =>
      `${member.name}${isDeprecated(at) ? ' (deprecated)' : ''}`;
    if (symbol.flags & ts.SymbolFlags.Class) {
      const type = checker.getTypeOfSymbolAtLocation(symbol, declaration);
      const construct = type.getConstructSignatures().map((s) => checker.signatureToString(s));
      lines.push(`class ${name}${mark}`);
      for (const signature of construct) lines.push(`  new ${portable(signature)}`);
      const instance = checker.getDeclaredTypeOfSymbol(symbol);
      for (const member of checker.getPropertiesOfType(instance)) {
        if (member.name.startsWith('#') || member.name.startsWith('__')) continue;
        const at = member.declarations?.[0];
        if (!at?.getSourceFile().fileName.startsWith(src)) continue;
        if (ts.getCombinedModifierFlags(at as ts.Declaration) & ts.ModifierFlags.Private) continue;
        lines.push(`  ${memberName(member, at)}: ${memberType(member, at as ts.Declaration)}`);
      }
    } else if (symbol.flags & (ts.SymbolFlags.Interface | ts.SymbolFlags.TypeAlias)) {
      const type = checker.getDeclaredTypeOfSymbol(symbol);
      if (symbol.flags & ts.SymbolFlags.TypeAlias) {
        const alias = symbol.declarations!.find(ts.isTypeAliasDeclaration)!;
        lines.push(`type ${name}${mark} = ${alias.type.getText().replace(/\s+/g, ' ')}`);
      } else {
        const heritage = symbol
          .declarations!.find(ts.isInterfaceDeclaration)
          ?.heritageClauses?.map((clause) => clause.getText().replace(/\s+/g, ' '))
          .join(' ');
        lines.push(`interface ${name}${mark}${heritage ? ` ${heritage}` : ''}`);
        for (const member of checker.getPropertiesOfType(type)) {
          const at = member.declarations?.[0];
          if (!at?.getSourceFile().fileName.startsWith(src)) continue;
          const optional = member.flags & ts.SymbolFlags.Optional ? '?' : '';
          const hasDefault = ts.getJSDocTags(at).some((tag) => tag.tagName.text === 'default');
          if (optional && name.endsWith('Options') && !hasDefault) {
            undocumentedDefaults.add(`${name}.${member.name}`);
          }
          lines.push(`  ${memberName(member, at)}${optional}: ${memberType(member, at)}`);
        }
      }
      if (symbol.flags & ts.SymbolFlags.Value) {
        const value = symbol.valueDeclaration ?? declaration;
        lines.push(
          `const ${name}: ${text(checker.getTypeOfSymbolAtLocation(symbol, value), value)}`,
        );
      }
    } else if (symbol.flags & ts.SymbolFlags.Function) {
      const type = checker.getTypeOfSymbolAtLocation(symbol, declaration);
      for (const signature of type.getCallSignatures()) {
        const text = checker.signatureToString(
          signature,
          declaration,
          FORMAT & ~ts.TypeFormatFlags.WriteArrowStyleSignature,
        );
        lines.push(`function ${name}${mark}${portable(text)}`);
      }
    } else {
      const type = checker.getTypeOfSymbolAtLocation(symbol, declaration);
      lines.push(`const ${name}${mark}: ${text(type, declaration)}`);
    }
    return lines;
  };

  const sections: string[] = [
    '# API report',
    '',
    'Generated by test/api/api.test.ts from the entry points of package.json. Review every change',
    'to this file as a change to the public contract (docs/versioning.md); update it with',
    '`npx vitest run test/api -u`.',
  ];
  const names: Record<string, string[]> = {};
  for (const [entry, file] of Object.entries(ENTRY_POINTS)) {
    const source = program.getSourceFile(path.join(root, file));
    const module = source && checker.getSymbolAtLocation(source);
    if (!module) throw new Error(`${file} is not a module`);
    const exports = checker
      .getExportsOfModule(module)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    names[entry] = exports.map((exported) => exported.name);
    sections.push('', `## ${entry}`, '', '```ts');
    for (const exported of exports) sections.push(...describe(exported.name, exported));
    sections.push('```');
  }
  return {
    text: `${sections.join('\n')}\n`,
    names,
    undocumentedDefaults: [...undocumentedDefaults].sort(),
  };
}
