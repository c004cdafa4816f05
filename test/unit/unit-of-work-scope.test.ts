/**
 * Every node runs its local actions in units of work (stores/unit.ts): its writes and events commit together
 * (pgstore tests), one AsyncLocalStorage scope per call.
 */
import { execFileSync } from "child_process";
import path from "path";

const ROOT = path.join(__dirname, "..", "..");

/** In a fresh process: the broker's middlewares, and how many AsyncLocalStorage scopes ran. */
function brokerOn(): { middlewares: string[]; scopes: number; answered: boolean } {
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
			const cfg = { ...readConfig(), dataDir: dir, logLevel: "error" };
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
	const out = execFileSync(process.execPath, ["--import", "tsx", "-e", code], {
		cwd: ROOT,
		encoding: "utf8",
		env: { ...process.env, NODE_OPTIONS: "", TEST_CRASH_AFTER_COMMIT: "" },
	});
	return JSON.parse(out.trim().split("\n").pop()!);
}

test("every local action in a unit (one scope per call)", () => {
	const r = brokerOn();
	expect(r.answered).toBe(true);
	expect(r.middlewares).toContain("UnitOfWork");
	expect(r.scopes).toBeGreaterThanOrEqual(2);
});
