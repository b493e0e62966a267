/**
 * Fails when the repository's own code uses one of the library's deprecated names: src, tests,
 * benches, examples and scripts move to the replacement when a name is deprecated, so the removal
 * release (test/unit/deprecations.test.ts) deletes the name and nothing else. Allowed: a use in
 * the file that declares the name (its own implementation), and test/unit/deprecations.test.ts,
 * which checks each still does what its replacement does. The TypeScript compiler decides what a
 * use is (its "is deprecated" suggestions), so a property or overload counts as well as an import.
 *
 *   npx tsx scripts/deprecated-uses.ts     (part of npm run lint)
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SRC = path.join(ROOT, 'src') + path.sep;
const ALLOWED = new Set([path.join(ROOT, 'test/unit/deprecations.test.ts')]);

const config = ts.getParsedCommandLineOfConfigFile(path.join(ROOT, 'tsconfig.json'), undefined, {
  ...ts.sys,
  onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
    throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
  },
});
if (!config) throw new Error('tsconfig.json could not be read');

const service = ts.createLanguageService({
  getScriptFileNames: () => config.fileNames,
  getScriptVersion: () => '1',
  getScriptSnapshot: (file) => {
    const text = ts.sys.readFile(file);
    return text === undefined ? undefined : ts.ScriptSnapshot.fromString(text);
  },
  getCurrentDirectory: () => ROOT,
  getCompilationSettings: () => config.options,
  getDefaultLibFileName: (options) => ts.getDefaultLibFilePath(options),
  fileExists: ts.sys.fileExists,
  readFile: ts.sys.readFile,
  readDirectory: ts.sys.readDirectory,
  directoryExists: ts.sys.directoryExists,
  getDirectories: ts.sys.getDirectories,
});
const checker = service.getProgram()!.getTypeChecker();

/** The files declaring what the deprecated use at `start` of `file` refers to. */
function declaredIn(file: ts.SourceFile, start: number): string[] {
  const node = (function find(at: ts.Node): ts.Node | undefined {
    if (start < at.getStart(file) || start >= at.getEnd()) return undefined;
    return at.forEachChild(find) ?? at;
  })(file);
  const symbol = node && checker.getSymbolAtLocation(node);
  const target =
    symbol && symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
  return (target?.declarations ?? []).map((declaration) => declaration.getSourceFile().fileName);
}

const uses: string[] = [];
for (const fileName of config.fileNames) {
  if (ALLOWED.has(fileName)) continue;
  const file = service.getProgram()!.getSourceFile(fileName)!;
  for (const diagnostic of service.getSuggestionDiagnostics(fileName)) {
    if (!diagnostic.reportsDeprecated || diagnostic.start === undefined) continue;
    const declarations = declaredIn(file, diagnostic.start);
    // The library's own names only (not the SDK's), and not inside the declaring file.
    if (!declarations.some((declared) => declared.startsWith(SRC))) continue;
    if (declarations.includes(fileName)) continue;
    const { line } = file.getLineAndCharacterOfPosition(diagnostic.start);
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ');
    uses.push(`${path.relative(ROOT, fileName)}:${line + 1}: ${message}`);
  }
}

if (uses.length > 0) {
  console.error(
    `Deprecated names used (move to the replacement each tag names):\n${uses.join('\n')}`,
  );
  process.exit(1);
}
console.log('deprecated-uses: no deprecated name of the library is used outside its own file');
