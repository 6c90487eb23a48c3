import { readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

/**
 * The public surface of a package entry point, for the packages' export-surface snapshot tests:
 * one line per exported name, `value <name>` or `type <name>`, sorted, with `export *` followed
 * into the module it re-exports. Parsing the barrel (rather than listing `Object.keys` of the
 * loaded module) also pins the exported types, which exist only at compile time.
 *
 * The tests compare it with a snapshot file, so adding or removing an export is a reviewed change,
 * and check its `value` lines against the module's runtime keys, so the parse cannot drift from
 * what the barrel really exports.
 */
export function exportSurface(indexPath: string): string[] {
  const names = new Map<string, 'value' | 'type'>()
  collect(resolve(indexPath), names, new Set())
  return [...names].map(([name, kind]) => `${kind} ${name}`).sort(byName)
}

/** The `value` names of a surface, sorted as `Object.keys(module).sort()` sorts them. */
export function valueNames(surface: readonly string[]): string[] {
  return surface
    .filter((l) => l.startsWith('value '))
    .map((l) => l.slice(6))
    .sort()
}

function byName(a: string, b: string): number {
  const x = a.slice(a.indexOf(' ') + 1)
  const y = b.slice(b.indexOf(' ') + 1)
  return x < y ? -1 : x > y ? 1 : a < b ? -1 : 1
}

function collect(file: string, names: Map<string, 'value' | 'type'>, seen: Set<string>): void {
  if (seen.has(file)) return
  seen.add(file)
  const src = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false)
  for (const st of src.statements) {
    if (ts.isExportDeclaration(st)) {
      const from = st.moduleSpecifier !== undefined && ts.isStringLiteral(st.moduleSpecifier)
      if (st.exportClause === undefined) {
        // `export * from './x.js'`: follow it.
        if (from) collect(sourceOf(file, (st.moduleSpecifier as ts.StringLiteral).text), names, seen)
        continue
      }
      if (ts.isNamedExports(st.exportClause)) {
        for (const el of st.exportClause.elements) {
          names.set(el.name.text, st.isTypeOnly || el.isTypeOnly ? 'type' : 'value')
        }
      } else {
        names.set(st.exportClause.name.text, st.isTypeOnly ? 'type' : 'value')
      }
      continue
    }
    const exported = ts.canHaveModifiers(st)
      ? ts.getModifiers(st)?.some((m) => m.kind === ts.SyntaxKind.ExportKeyword)
      : false
    if (!exported) continue
    if (ts.isInterfaceDeclaration(st) || ts.isTypeAliasDeclaration(st)) names.set(st.name.text, 'type')
    else if (ts.isVariableStatement(st)) {
      for (const d of st.declarationList.declarations)
        if (ts.isIdentifier(d.name)) names.set(d.name.text, 'value')
    } else if (
      (ts.isFunctionDeclaration(st) || ts.isClassDeclaration(st) || ts.isEnumDeclaration(st)) &&
      st.name !== undefined
    ) {
      names.set(st.name.text, 'value')
    }
  }
}

function sourceOf(from: string, specifier: string): string {
  return resolve(dirname(from), specifier.replace(/\.js$/, '.ts'))
}

/**
 * The export-surface test of a package: for its entry point (and its `/testing` subpath when
 * given), the parsed surface's values must be the loaded module's runtime keys, and the whole
 * surface must match the snapshot file beside the test (`__snapshots__/surface.<entry>.snap`).
 * `testUrl` is the test file's `import.meta.url`.
 */
export function describePublicSurface(
  testUrl: string,
  modules: { readonly index: object; readonly testing?: object },
): void {
  describe('public surface', () => {
    for (const [entry, mod, path] of [
      ['index', modules.index, '../src/index.ts'],
      ['testing', modules.testing, '../src/testing/index.ts'],
    ] as const) {
      if (mod === undefined) continue
      it(`of ${entry === 'index' ? 'the entry point' : 'the /testing subpath'}`, async () => {
        const surface = exportSurface(new URL(path, testUrl).pathname)
        expect(valueNames(surface)).toEqual(Object.keys(mod).sort())
        await expect(surface.join('\n')).toMatchFileSnapshot(`__snapshots__/surface.${entry}.snap`)
      })
    }
  })
}
