/**
 * What loading the platform compiles: the modules only some deployments or requests use stay unloaded until one does
 * (lib/lazy.ts; docs/decisions.md, "Modules loaded on first use"). A plain `import` of one of them, anywhere the
 * platform reaches at start, would put it back into every process's and every test file's start-up.
 */
import { execFileSync } from "child_process";
import path from "path";

const ROOT = path.resolve(__dirname, "../..");
const LAZY = ["@modelcontextprotocol/sdk", "zod", "ajv", "moleculer-repl", "commander", "ioredis", "mqtt", "web-push", "casbin", "nats"];

test("importing the platform loads none of the modules kept for first use, and each still resolves", () => {
	const script = `require("./platform.ts");
		const pkgs = new Set(Object.keys(require.cache).map((f) => /node_modules\\/((@[^/]+\\/)?[^/]+)/.exec(f)?.[1]).filter(Boolean));
		process.stdout.write(JSON.stringify([...pkgs]));`;
	const loaded = JSON.parse(
		execFileSync(process.execPath, ["--require", "tsx/cjs", "-e", script], { cwd: ROOT, encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "" } }),
	) as string[];
	expect(loaded).toContain("moleculer");
	expect(loaded).toContain("pg");
	expect(LAZY.filter((p) => loaded.includes(p))).toEqual([]);
	for (const p of LAZY) expect(() => require.resolve(p === "@modelcontextprotocol/sdk" ? "@modelcontextprotocol/sdk/server/index.js" : p)).not.toThrow();
});
