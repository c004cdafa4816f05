/**
 * Units of work (mixins/stores/unit.ts) exist for PostgreSQL only: a node on another store gets no unit-of-work
 * middleware, so it never opens an AsyncLocalStorage scope, whose first use turns on Node's promise hooks for every
 * promise of the process. A node on PostgreSQL gets it (its writes and events commit together: pgstore tests).
 */
import { execFileSync } from "child_process";
import path from "path";

const ROOT = path.join(__dirname, "..", "..");

/** In a fresh process: the broker's middlewares for DOCUMENT_STORE, and how many AsyncLocalStorage scopes ran. */
function brokerOn(store: "nedb" | "postgres"): { middlewares: string[]; scopes: number; answered: boolean } {
	const code = `
		const { AsyncLocalStorage } = require("async_hooks");
		let scopes = 0;
		const run = AsyncLocalStorage.prototype.run;
		AsyncLocalStorage.prototype.run = function (...a) { scopes++; return run.apply(this, a); };
		const { ServiceBroker } = require("moleculer");
		const { brokerOptions } = require("./moleculer.config.ts");
		const { readConfig } = require("./runtime/config.ts");
		const dir = require("fs").mkdtempSync(require("path").join(require("os").tmpdir(), "uow-"));
		(async () => {
			const cfg = { ...readConfig(), dataDir: dir, documentStore: ${JSON.stringify(store)}, logLevel: "error" };
			const broker = new ServiceBroker({ ...brokerOptions(cfg), metrics: { enabled: false }, skipProcessEventRegistration: true });
			broker.createService({ name: "probe", actions: { ok: async () => { await Promise.resolve(); return "ok"; } } });
			await broker.start();
			const answered = (await broker.call("probe.ok")) === "ok" && (await broker.call("probe.ok")) === "ok";
			const middlewares = broker.middlewares.list.map((m) => m.name).filter(Boolean);
			await broker.stop();
			require("fs").rmSync(dir, { recursive: true, force: true });
			console.log(JSON.stringify({ middlewares, scopes, answered }));
		})();
	`;
	const out = execFileSync(process.execPath, ["--import", "tsx", "-e", code], { cwd: ROOT, encoding: "utf8", env: { ...process.env, NODE_OPTIONS: "", TEST_CRASH_AFTER_COMMIT: "" } });
	return JSON.parse(out.trim().split("\n").pop()!);
}

test("a node on NeDB: no unit-of-work middleware, no AsyncLocalStorage scope for its actions", () => {
	const r = brokerOn("nedb");
	expect(r.answered).toBe(true);
	expect(r.middlewares).not.toContain("UnitOfWork");
	expect(r.middlewares).toContain("Authority");
	expect(r.scopes).toBe(0);
});

test("a node on PostgreSQL: every local action in a unit (one scope per call)", () => {
	const r = brokerOn("postgres");
	expect(r.answered).toBe(true);
	expect(r.middlewares).toContain("UnitOfWork");
	expect(r.scopes).toBeGreaterThanOrEqual(2);
});
