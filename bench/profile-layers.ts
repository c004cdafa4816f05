/**
 * Where a platform's CPU profile spends its time, by layer (docs/benchmarks.md, "Profile"):
 * `npx tsx bench/profile-layers.ts <file.cpuprofile> [from-s] [to-s]` for a profile taken with
 * `node --cpu-prof --import tsx start.ts`; from/to (seconds since the profile's start) keep only the samples of the
 * load. Each sample counts for the nearest project frame above it (a `pg` socket write called by the store is store
 * time; Moleculer's and Node's own frames are skipped on the way), else for the broker or Node's internals.
 */
import { readFileSync } from "fs";

interface Frame {
	functionName: string;
	url: string;
}
interface ProfileNode {
	id: number;
	callFrame: Frame;
	children?: number[];
}
interface Profile {
	nodes: ProfileNode[];
	samples: number[];
	timeDeltas: number[];
}

const LAYERS: Array<[RegExp, string]> = [
	[/services\/api|moleculer-web|lib\/routes|lib\/openapi/, "gateway (HTTP, routing, envelope)"],
	[/services\/auth|lib\/tokens|bcrypt|jsonwebtoken|auth\.service/, "auth (token check)"],
	[/authority\/|lib\/authority|lib\/grants|lib\/zones|lib\/plan|lib\/query-safety|lib\/scopes|lib\/safe-regex/, "authority (scopes, grants, zones, query checks)"],
	[/stores\/|lib\/relational|\/pg\/|pg-protocol|pg-pool/, "store (SQL, driver, rows)"],
	[/engine\/|lib\/present|lib\/validate|\.service\.ts/, "engine (collection actions)"],
	[/events\/|workers\/|lib\/stat-buckets|lib\/audit|lib\/mqtt|aedes|mqtt/, "change events, workers, audit"],
	[/lib\/metrics/, "metrics"],
];

function layerOf(p: ProfileNode, parent: Map<number, ProfileNode>): string {
	const name = p.callFrame.functionName;
	if (name === "(idle)") return "(idle)";
	if (name === "(garbage collector)") return "GC";
	for (let x: ProfileNode | undefined = p; x; x = parent.get(x.id)) {
		const url = x.callFrame.url;
		if (!url || /node_modules\/moleculer\/|^node:/.test(url)) continue;
		const hit = LAYERS.find(([re]) => re.test(url));
		if (hit) return hit[1];
		if (!url.includes("node_modules")) return `other project code: ${url.replace(/^.*?\/(?=[a-z-]+\/[^/]+\.ts$)/, "")}`;
	}
	if (/moleculer/.test(p.callFrame.url)) return "broker (moleculer)";
	return p.callFrame.url.startsWith("node:") ? "node internals (sockets, streams, timers)" : `native: ${name}`;
}

export function layers(profile: Profile, fromS = 0, toS = Infinity): Map<string, number> {
	const byId = new Map(profile.nodes.map((n) => [n.id, n]));
	const parent = new Map<number, ProfileNode>();
	for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n);
	const out = new Map<string, number>();
	let clock = 0;
	for (let i = 0; i < profile.samples.length; i++) {
		const dt = profile.timeDeltas[i] ?? 0;
		clock += dt;
		if (clock < fromS * 1e6 || clock > toS * 1e6) continue;
		const layer = layerOf(byId.get(profile.samples[i])!, parent);
		out.set(layer, (out.get(layer) ?? 0) + dt);
	}
	return out;
}

if (require.main === module) {
	const [file, from, to] = process.argv.slice(2);
	if (!file) {
		console.error("usage: npx tsx bench/profile-layers.ts <file.cpuprofile> [from-s] [to-s]");
		process.exit(2);
	}
	const sums = layers(JSON.parse(readFileSync(file, "utf8")) as Profile, Number(from ?? 0), to === undefined ? Infinity : Number(to));
	const busy = [...sums].filter(([k]) => k !== "(idle)").reduce((a, [, v]) => a + v, 0);
	console.log(`busy ${(busy / 1e3).toFixed(0)} ms`);
	for (const [k, v] of [...sums].sort((a, b) => b[1] - a[1]))
		console.log(`${(v / 1e3).toFixed(0).padStart(7)} ms ${k === "(idle)" ? "      " : `${((100 * v) / busy).toFixed(1).padStart(5)}%`}  ${k}`);
}
