/**
 * The gateway's per-request shortcuts give the answers of the generic code they replace: the alias index resolves
 * every request as moleculer-web's linear scan does, and the lean metrics keep the counts, sums and buckets
 * Moleculer's histograms and counters would hold.
 */
import { ServiceBroker } from "moleculer";
import { AliasIndex } from "../../services/api/alias-index";
import { LeanMetricsMiddleware } from "../../runtime/metrics";
import { allRoutes } from "../../lib/routes";
const Alias = require("moleculer-web/src/alias");

function aliasesOf(paths: Array<[string, string]>) {
	const service = { logger: { info() {}, debug() {} } };
	// moleculer-web's route path for the gateway's routes (settings.path "", route path ""): "/".
	const route = { path: "/", opts: {} };
	return paths.map(([method, p]) => new Alias(service, route, `${method} ${p}`, "x.y"));
}

/** moleculer-web's own resolution: the first alias in order whose method and regular expression match. */
function linear(aliases: any[], url: string, method: string) {
	for (const alias of aliases) {
		if (!alias.isMethod(method)) continue;
		const params = alias.match(url);
		if (params) return { alias, params };
	}
	return false;
}

describe("alias index", () => {
	const table: Array<[string, string]> = [
		...allRoutes().map((r) => [r.method, r.path] as [string, string]),
		["GET", "/"],
		["GET", "/api-json/:service"],
		["*", "/status"],
		["GET", "/:anything/odd"],
		["GET", "/file.v2/x"],
	];
	const aliases = aliasesOf(table);
	const index = new AliasIndex(aliases);
	const urls = [
		"/",
		"/content/notes",
		"/content/notes/0123456789abcdef01234567",
		"/Content/NOTES/abc",
		"/content/notes/count",
		"/content/notes/bulk",
		"/content/notes/abc/restore",
		"/content/notes/abc/destroy",
		"/content/nope",
		"/identity/users/me",
		"/auth/token",
		"/AUTH/token",
		"/status",
		"/api-json/content",
		"/nothing/odd",
		"/content/odd",
		"/file.v2/x",
		"/\u212Aontent/notes",
		"/c%6Fntent/notes",
		"//content/notes",
		"*",
		"http://host/content/notes",
		"/content/notes/a%2Fb",
	];
	const methods = ["GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"];
	test.each(urls)("%s resolves as the linear scan does, for every method", (url) => {
		for (const method of methods) {
			const a = index.resolve(url, method);
			const b = linear(aliases, url, method);
			expect(a && { path: a.alias.fullPath, method: a.alias.method, params: a.params }).toEqual(b && { path: b.alias.fullPath, method: b.alias.method, params: b.params });
		}
	});
	test("the index finds the collection routes (not only misses)", () => {
		const found = index.resolve("/content/notes/0123456789abcdef01234567", "GET");
		expect(found && found.alias.fullPath).toBe("/content/notes/:id");
		expect(found && found.params).toEqual({ id: "0123456789abcdef01234567" });
	});
});

describe("lean metrics", () => {
	async function brokerWith(lean: boolean) {
		const broker = new ServiceBroker({ logger: false, metrics: { enabled: true }, middlewares: lean ? [LeanMetricsMiddleware as any] : [] });
		broker.createService({ name: "m", actions: { ok: () => "ok", bad: () => Promise.reject(new Error("no")) } });
		await broker.start();
		return broker;
	}
	test("counts, sums and buckets equal Moleculer's own; no quantile window, no rate", async () => {
		const [plain, lean] = [await brokerWith(false), await brokerWith(true)];
		try {
			for (const b of [plain, lean]) {
				b.metrics.register({ type: "histogram", name: "t.h", labelNames: ["k"], buckets: [0.001, 0.0025, 0.1, 1, 2.5] } as any);
				for (const v of [0.0005, 0.001, 0.002, 0.05, 0.3, 2, 7]) b.metrics.observe("t.h", v, { k: v > 0.01 ? "big" : "small" });
				for (let i = 0; i < 3; i++) await b.call("m.ok");
				await b.call("m.bad").catch(() => undefined);
			}
			const shape = (b: ServiceBroker, name: string) =>
				(b.metrics.getMetric(name) as any)
					.snapshot()
					.map((i: any) => ({ labels: i.labels, value: i.value, count: i.count, sum: typeof i.sum === "number" ? "number" : undefined, buckets: i.buckets }));
			expect(shape(lean, "t.h")).toEqual(shape(plain, "t.h"));
			const h = (lean.metrics.getMetric("t.h") as any).snapshot();
			expect(h.find((i: any) => i.labels.k === "big").buckets).toEqual({ 0.001: 0, 0.0025: 0, 0.1: 1, 1: 2, 2.5: 3 });
			for (const name of ["moleculer.request.total", "moleculer.request.error.total", "moleculer.request.time"]) {
				const s = shape(lean, name);
				expect(s.length).toBeGreaterThan(0);
				// Timings differ between brokers; counts and bucket totals by label do not.
				const counts = (x: any[]) => x.map((i) => ({ labels: i.labels, value: i.value, count: i.count }));
				expect(counts(s)).toEqual(counts(shape(plain, name)));
			}
			const time = (lean.metrics.getMetric("moleculer.request.time") as any).snapshot().find((i: any) => i.labels.action === "m.ok");
			expect(time.count).toBe(3);
			// Each call lands in every bucket at or above its own duration: counts never fall from one bound to the
			// next, and the widest bound (10 s) holds all three (a call's duration on a loaded machine is not fixed).
			const bounds = Object.keys(time.buckets)
				.map(Number)
				.sort((a, b) => a - b);
			const counts = bounds.map((b) => time.buckets[b]);
			expect(counts).toEqual([...counts].sort((a, b) => a - b));
			expect(bounds[bounds.length - 1]).toBeGreaterThanOrEqual(10_000);
			expect(counts[counts.length - 1]).toBe(3);
			expect(time.quantiles).toBeUndefined();
			expect(time.rate).toBeUndefined();
			expect((plain.metrics.getMetric("moleculer.request.time") as any).snapshot().find((i: any) => i.labels.action === "m.ok").quantiles).toBeDefined();
		} finally {
			await plain.stop();
			await lean.stop();
		}
	});
});

describe("grant cache: the loaded index without a promise", () => {
	test("none before loading and after an invalidation; the loaded one otherwise; a stale load is not kept", async () => {
		const { GrantCache } = await import("../../authority/grant-cache");
		const cache = new GrantCache();
		let calls = 0;
		let release: (v: { grants: [] }) => void = () => undefined;
		const caller = {
			call: () => {
				calls++;
				return calls === 2 ? new Promise<{ grants: [] }>((r) => (release = r)) : Promise.resolve({ grants: [] as [] });
			},
		};
		expect(cache.loaded()).toBeUndefined();
		const first = await cache.get(caller as any);
		expect(cache.loaded()).toBe(first);
		cache.invalidate();
		expect(cache.loaded()).toBeUndefined();
		const pending = cache.get(caller as any);
		// A change while the snapshot loads: that snapshot serves its caller only.
		cache.invalidate();
		release({ grants: [] });
		const stale = await pending;
		expect(stale).not.toBe(first);
		expect(cache.loaded()).toBeUndefined();
		const fresh = await cache.get(caller as any);
		expect(calls).toBe(3);
		expect(cache.loaded()).toBe(fresh);
	});
});
