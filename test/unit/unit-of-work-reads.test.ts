/**
 * On PostgreSQL, a collection action that only reads (get, list, count, cursor) runs without a unit of work, and the
 * unit's scope storage is off whenever no unit runs (stores/unit.ts): Node's promise hooks, which every
 * promise of the process pays for while the storage is on, are then off. A write still runs in a unit, and its
 * writes still see it; once it has ended, the hooks are off again.
 */
import { execFileSync } from "child_process";
import path from "path";

const ROOT = path.join(__dirname, "..", "..");

interface Probe {
	scopes: Record<string, number>;
	/** Whether promise hooks ran after each step: a promise continuation's executionAsyncId is 0 without them. */
	hooks: Record<string, boolean>;
	inUnit: Record<string, boolean>;
}

function probe(): Probe {
	const code = `
		const { AsyncLocalStorage, executionAsyncId } = require("async_hooks");
		let scopes = 0;
		const run = AsyncLocalStorage.prototype.run;
		AsyncLocalStorage.prototype.run = function (...a) { scopes++; return run.apply(this, a); };
		const { ServiceBroker } = require("moleculer");
		const { brokerOptions } = require("./moleculer.config.ts");
		const { readConfig } = require("./runtime/config.ts");
		const { inUnit } = require("./stores/unit.ts");
		const dir = require("fs").mkdtempSync(require("path").join(require("os").tmpdir(), "uow-reads-"));
		const hooksOn = () => Promise.resolve().then(() => executionAsyncId() !== 0);
		(async () => {
			const cfg = { ...readConfig(), dataDir: dir, logLevel: "error" };
			const broker = new ServiceBroker({ ...brokerOptions(cfg), metrics: { enabled: false }, skipProcessEventRegistration: true });
			const seen = {};
			const action = (op) => ({ collection: { service: "probe", collection: "things", op, level: "read" }, handler: async () => { await Promise.resolve(); seen[op] = inUnit(); return op; } });
			broker.createService({ name: "probe", actions: { get: action("get"), list: action("list"), count: action("count"), cursor: action("cursor"), create: action("create"), remove: action("remove"), plain: { handler: async () => { seen.plain = inUnit(); return "plain"; } } } });
			await broker.start();
			const out = { scopes: {}, hooks: { start: await hooksOn() }, inUnit: seen };
			for (const a of ["get", "list", "count", "cursor", "create", "get", "remove", "plain", "list"]) {
				const before = scopes;
				if ((await broker.call("probe." + a)) !== a) throw new Error("no answer from " + a);
				out.scopes[a] = (out.scopes[a] ?? 0) + scopes - before;
				out.hooks[a] = (out.hooks[a] ?? false) || (await hooksOn());
			}
			await broker.stop();
			require("fs").rmSync(dir, { recursive: true, force: true });
			console.log(JSON.stringify(out));
		})();
	`;
	const out = execFileSync(process.execPath, ["--import", "tsx", "-e", code], {
		cwd: ROOT,
		encoding: "utf8",
		env: { ...process.env, NODE_OPTIONS: "", TEST_CRASH_AFTER_COMMIT: "" },
	});
	return JSON.parse(out.trim().split("\n").pop()!);
}

test("PostgreSQL node: reads run without a unit and leave the promise hooks off; writes run in one, which ends with them off", () => {
	const r = probe();
	expect(r.hooks.start).toBe(false);
	for (const op of ["get", "list", "count", "cursor"]) {
		expect({ op, scopes: r.scopes[op], inUnit: r.inUnit[op], hooks: r.hooks[op] }).toEqual({ op, scopes: 0, inUnit: false, hooks: false });
	}
	for (const op of ["create", "remove", "plain"]) {
		expect({ op, scopes: r.scopes[op], inUnit: r.inUnit[op] }).toEqual({ op, scopes: 1, inUnit: true });
		// After the unit: the storage is off again, so are the hooks.
		expect({ op, hooks: r.hooks[op] }).toEqual({ op, hooks: false });
	}
});
