/**
 * Self time of a V8 .cpuprofile (node --cpu-prof) summed by file and by function: `npx tsx bench/cpuprofile.ts
 * file.cpuprofile [top]`. Files are shown relative to the project, node_modules by package, Node internals as such.
 */
import { readFileSync } from "fs";
import path from "path";

interface Node {
	id: number;
	callFrame: { functionName: string; url: string; lineNumber: number };
	children?: number[];
}

const ROOT = path.resolve(__dirname, "..");

function where(url: string): string {
	if (!url) return "(native / program / gc)";
	const p = url.replace(/^file:\/\//, "");
	const nm = p.lastIndexOf("node_modules/");
	if (nm >= 0) {
		const rest = p.slice(nm + 13).split("/");
		return `npm:${rest[0].startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]}`;
	}
	if (p.startsWith("node:")) return p;
	return path.relative(ROOT, p) || p;
}

/**
 * `from`/`to`: seconds since the profile began (a window: the load, the workers' drain); the timeline (busy share of
 * each second) shows where they are.
 */
export function summarise(file: string, top = 30, from = 0, to = Infinity): string {
	const prof = JSON.parse(readFileSync(file, "utf8")) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
	const byId = new Map(prof.nodes.map((n) => [n.id, n]));
	const self = new Map<number, number>();
	const idleId = prof.nodes.find((n) => n.callFrame.functionName === "(idle)")?.id;
	const busy: number[] = [];
	let t = 0;
	prof.samples.forEach((id, i) => {
		const d = prof.timeDeltas[i] ?? 0;
		t += d;
		const sec = Math.floor(t / 1e6);
		if (id !== idleId) busy[sec] = (busy[sec] ?? 0) + d;
		if (t / 1e6 >= from && t / 1e6 < to) self.set(id, (self.get(id) ?? 0) + d);
	});
	const timeline = Array.from(busy, (us, s) => `${s}:${Math.round((us ?? 0) / 1e4)}`).join(" ");
	const total = [...self.values()].reduce((a, b) => a + b, 0);
	const files = new Map<string, number>();
	const fns = new Map<string, number>();
	for (const [id, us] of self) {
		const n = byId.get(id)!;
		const f = n.callFrame.functionName === "(idle)" ? "(idle)" : where(n.callFrame.url);
		files.set(f, (files.get(f) ?? 0) + us);
		const fn = `${n.callFrame.functionName || "(anonymous)"} ${f}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ""}`;
		fns.set(fn, (fns.get(fn) ?? 0) + us);
	}
	// Inclusive: a sample counts once for every project file on its stack (what a layer costs, callees included).
	const parent = new Map<number, number>();
	for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
	const inclusive = new Map<string, number>();
	for (const [id, us] of self) {
		const seen = new Set<string>();
		for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
			const w = where(byId.get(at)!.callFrame.url);
			if (!w.startsWith("npm:") && !w.startsWith("node:") && !w.startsWith("(")) seen.add(w);
		}
		for (const w of seen) inclusive.set(w, (inclusive.get(w) ?? 0) + us);
	}
	const rows = (m: Map<string, number>) =>
		[...m]
			.sort((a, b) => b[1] - a[1])
			.slice(0, top)
			.map(([k, us]) => `${((100 * us) / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(0).padStart(7)} ms  ${k}`);
	return [
		`busy % per second: ${timeline}`,
		"",
		`total ${(total / 1000).toFixed(0)} ms sampled in the window`,
		"",
		"self time by file:",
		...rows(files),
		"",
		"inclusive time by project file:",
		...rows(inclusive),
		"",
		"self time by function:",
		...rows(fns),
	].join("\n");
}

if (require.main === module) console.log(summarise(process.argv[2], Number(process.argv[3] ?? 30), Number(process.argv[4] ?? 0), Number(process.argv[5] ?? Infinity)));
