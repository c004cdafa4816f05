/**
 * The layout stays true: every import of the project's TypeScript runs down the rooms (test/layers.ts, the table;
 * docs/architecture.md, what each room is). A rule in lib/ importing the runtime, the engine importing the authority
 * layer, the services' registry importing the workers: each fails here, named file to file.
 */
import path from "path";
import { describeArrow, importsOf, projectSources, roomOf, ROOMS, wrongArrows } from "../layers";

const ROOT = path.resolve(__dirname, "../..");

describe("rooms and their imports", () => {
	const sources = projectSources(ROOT);

	it("no import runs the wrong way", () => {
		expect(wrongArrows(sources).map(describeArrow)).toEqual([]);
	});

	it("every file of the project belongs to a room", () => {
		expect([...sources.keys()].filter((f) => !roomOf(f))).toEqual([]);
		// The rooms the issue names are all there, and the scan sees them.
		for (const room of ["catalog", "lib", "runtime", "stores", "engine", "events", "authority", "services", "workers", "start", "console"]) {
			expect([...sources.keys()].some((f) => roomOf(f)?.name === room)).toBe(true);
		}
	});

	it("reports a wrong arrow, file to file: a rule importing the runtime, the engine the authority layer, services the workers", () => {
		const fake = new Map<string, string>([
			["lib/zones.ts", 'import { configOf } from "../runtime/config";\nimport { badRequest } from "./errors";'],
			["engine/collection.mixin.ts", 'import type { X } from "../authority/authority";\nimport { sharedOutbox } from "../events/outbox";'],
			["services/index.ts", 'export { workerCatalog } from "../workers";'],
			["workers/watcher.worker.ts", 'const m = require("../services/context.service");\nconst n = await import("../lib/contracts");'],
			["lib/grants.ts", 'import { readFileSync } from "node:fs";\nimport { createHash } from "crypto";'],
			["runtime/kv.ts", 'import { withLease } from "../stores/unit";'],
		]);
		expect(wrongArrows(fake).map(describeArrow).sort()).toEqual(
			[
				"lib/zones.ts (lib) -> runtime/config (runtime)",
				"engine/collection.mixin.ts (engine) -> authority/authority (authority)",
				"services/index.ts (services) -> workers (workers)",
				"workers/watcher.worker.ts (workers) -> services/context.service (services)",
				"lib/grants.ts (lib) -> node:fs (banned module)",
				"runtime/kv.ts (runtime) -> stores/unit (stores)",
			].sort(),
		);
	});

	it("the browser console imports nothing of the server, and no Node module; its .tsx files are read too", () => {
		const fake = new Map<string, string>([
			["console/views/grants.tsx", 'import { grantProblems } from "../../lib/grants";\nimport { api } from "../api";'],
			["console/api.ts", 'import { readFileSync } from "node:fs";\nimport { h } from "preact";'],
		]);
		expect(wrongArrows(fake).map(describeArrow).sort()).toEqual(["console/api.ts (console) -> node:fs (banned module)", "console/views/grants.tsx (console) -> lib/grants (lib)"]);
		expect([...sources.keys()].filter((f) => f.startsWith("console/") && f.endsWith(".tsx")).length).toBeGreaterThan(0);
	});

	it("reads every form of import, and not the paths comments mention", () => {
		const src = [
			'import a from "./a";',
			'import type { B } from "../b";',
			"import {\n\tc,\n\td,\n} from './c';",
			'export * from "./e";',
			'export { f } from "./f";',
			'import "./g";',
			'const h = await import("./h");',
			'const i = require("./i");',
			'const j = require.resolve("./j");',
			'// import x from "./comment";',
			'/* require("./block") */',
			'const glob = "*/*"; const q = /["\']/;',
			'const k = require("./k") as typeof import("./k2");',
			'const t = `import z from "./template"`;',
		].join("\n");
		expect(importsOf(src).sort()).toEqual(["../b", "./a", "./c", "./e", "./f", "./g", "./h", "./i", "./j", "./k", "./k2"]);
	});

	it("the table is ordered from the ground up: a room may import only rooms below it", () => {
		const order = ROOMS.map((r) => r.name);
		for (const room of ROOMS) for (const below of room.may) expect(order.indexOf(below)).toBeLessThan(order.indexOf(room.name));
	});
});
