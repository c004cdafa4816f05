/**
 * Explicit `any` in the project's own sources stays within a budget: every `any` keyword (`: any`, `as any`, `any[]`,
 * `Context<any, any>`...) of every .ts and .tsx file the layout test scans (test/layers.ts: the server, bench/ and the
 * browser console; not test/, not node_modules) counts. An `any` switches the type checker off where it stands, so a
 * new one must be paid for by removing another; the budget only goes down.
 */
import path from "path";
import ts from "typescript";
import { projectSources } from "../layers";

const ROOT = path.resolve(__dirname, "../..");

/** The most `any` keywords the sources may hold. Lower it when the count falls; never raise it. */
const BUDGET = 9;

/** How many `any` keywords a source holds (the parser's count: comments and strings that say "any" are not counted). */
function anyCount(file: string, source: string): number {
	const sf = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, false, file.endsWith(".tsx") ? ts.ScriptKind.TSX : ts.ScriptKind.TS);
	let n = 0;
	const visit = (node: ts.Node): void => {
		if (node.kind === ts.SyntaxKind.AnyKeyword) n++;
		ts.forEachChild(node, visit);
	};
	visit(sf);
	return n;
}

describe("explicit any", () => {
	it("counts the keyword only, in types and assertions", () => {
		const sample = ["// any", "const s = 'any';", "let x: any;", "const y = x as any;", "const z: Array<any> = [];", "function f(a: any[]): Promise<any> { return a as never; }"];
		expect(anyCount("a.ts", sample.join("\n"))).toBe(5);
		expect(anyCount("a.tsx", "const v = <div>{x as any}</div>;")).toBe(1);
	});

	it(`the sources hold at most ${BUDGET}`, () => {
		const counts = [...projectSources(ROOT)].map(([file, source]) => ({ file, n: anyCount(file, source) })).filter((c) => c.n > 0);
		const total = counts.reduce((sum, c) => sum + c.n, 0);
		const top = counts
			.sort((a, b) => b.n - a.n || a.file.localeCompare(b.file))
			.slice(0, 10)
			.map((c) => `${String(c.n).padStart(4)}  ${c.file}`);
		console.log(`explicit any: ${total} (budget ${BUDGET}); the files that hold the most:\n${top.join("\n")}`);
		expect(total).toBeLessThanOrEqual(BUDGET);
	});
});
