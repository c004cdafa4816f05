/**
 * Webhook delivery is fair across configs, on both document stores, with the two tenants of bootTenancy: tenant A's
 * webhook host does not resolve (a `.invalid` name: every attempt fails at once, as the getting-started example's
 * host does on a machine that cannot reach it) and A writes 1 000 notes in one bulk create; tenant B's webhook (a
 * receiver in this test) then gets each of B's 20 notes, written one by one during A's backlog and its first retry
 * wave, within 1 s of the answer to its create, while A's webhook backs off alone (its circuit breaker). The per-config
 * metrics (attempts, failures, delivery lag, breaker) in /metrics say the same. Once A points its webhook at a working
 * receiver, A's breaker closes at once and A's backlog flows.
 */
import http from "http";
import { execFileSync, spawnSync } from "child_process";
import { randomBytes } from "crypto";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { sleep, waitForValue } from "../helpers/wait";

/** Tenant B's webhook receiver on 127.0.0.1: answers 200, records when each document's event arrived. */
async function receiver() {
	const arrived = new Map<string, number>();
	const server = http.createServer((req, res) => {
		let text = "";
		req.on("data", (c) => (text += c));
		req.on("end", () => {
			const at = Date.now();
			const id = JSON.parse(text || "{}").id;
			if (typeof id === "string" && !arrived.has(id)) arrived.set(id, at);
			res.writeHead(200).end();
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
	return {
		arrived,
		url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
		close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
	};
}

type Row = { document_id: string; status: string; attempts: number; last_error: string | null };

/** The /metrics lines of `name` whose labels include every pair of `labels`. */
function lines(text: string, name: string, labels: Record<string, string>): string[] {
	const pairs = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
	return text.split("\n").filter((l) => l.startsWith(`${name}{`) && pairs.every((p) => l.slice(name.length).split(/[{},]/).includes(p)));
}

/** The value of the one such line; undefined without one. */
function value(text: string, name: string, labels: Record<string, string>): number | undefined {
	const found = lines(text, name, labels);
	expect(found.length).toBeLessThanOrEqual(1);
	return found.length ? Number(found[0].split(" ").pop()) : undefined;
}

/** Prometheus' checker, when installed (test/integration/firsthour-metrics.test.ts requires it under REQUIRE_SERVERS=1). */
const promtool = (() => {
	try {
		return execFileSync("which", ["promtool"], { encoding: "utf8" }).trim();
	} catch {
		return "";
	}
})();

const B_NOTES = 20;
/** B's creates are spread over about 8 s: past A's first attempts and into the retry wave 5 s (±20 %) after them. */
const B_EVERY_MS = 400;

describe("webhook fairness across tenants", () => {
	let t: Tenancy;
	let rx: Awaited<ReturnType<typeof receiver>>;
	let rxA: Awaited<ReturnType<typeof receiver>> | undefined;
	let configA: string;
	/** A's 1 000 notes. */
	const aIds = new Set<string>();
	let configB: string;

	/** Every delivery of a client, from the dispatcher's queue (the listing action stops at 1 000). */
	const rowsOf = async (client: string) =>
		(await (t.p.broker.getLocalService("dispatcher") as any).db.query("select document_id, status, attempts, last_error from deliveries where client_id = $1", [client]))
			.rows as Row[];

	beforeAll(async () => {
		rx = await receiver();
		// The default retry schedule (immediately, 5 s, 5 min, ...); private addresses allowed for B's local receiver.
		t = await bootTenancy({ webhookAllowPrivate: true });
		const webhook = async (token: string, eid: string, url: string) =>
			(await ok(t.as(token, "POST", "/context/configs", { key: "CQRS", eid, value: { webhook: url } }), "CQRS config")).data.id as string;
		configA = await webhook(t.a.admin.token, t.a.client.id, `https://hooks-${randomBytes(4).toString("hex")}.invalid/platform`);
		configB = await webhook(t.b.admin.token, t.b.client.id, rx.url);
		// B's webhook works: its config's own creation reaches it.
		await waitForValue("B's config event", async () => rx.arrived.has(configB), 15_000);
	}, 180_000);
	afterAll(async () => {
		await t?.cleanup();
		await rx?.close();
		await rxA?.close();
	});

	test("tenant A's 1 000 failing deliveries delay none of tenant B's by more than 1 s", async () => {
		const items = Array.from({ length: 1000 }, (_, i) => ({ title: `a${i}` }));
		const bulk = await ok(t.as(t.a.admin.token, "POST", "/content/notes/bulk", { items }), "A's bulk create");
		expect(bulk.items).toHaveLength(1000);
		for (const n of bulk.items) aIds.add(n.id);
		// A's backlog is queued before B writes.
		await waitForValue("A's 1 000 deliveries queued", async () => (await rowsOf(t.a.client.id)).filter((r) => aIds.has(r.document_id)).length === 1000, 60_000);

		const created: Array<{ id: string; at: number }> = [];
		for (let i = 0; i < B_NOTES; i++) {
			const n = (await ok(t.as(t.b.admin.token, "POST", "/content/notes", { title: `b${i}` }), "B's note")).data;
			created.push({ id: n.id, at: Date.now() });
			await sleep(B_EVERY_MS);
		}
		await waitForValue("B's notes delivered", async () => created.every((c) => rx.arrived.has(c.id)), 20_000).catch(() => undefined);
		const lags = created.map((c) => (rx.arrived.has(c.id) ? rx.arrived.get(c.id)! - c.at : Infinity));
		console.log(`B's delivery lag during A's backlog (ms): ${lags.join(", ")}`);
		expect(lags.filter((l) => l >= 1000)).toEqual([]);

		// A's webhook backed off alone: a few attempts (its first deliveries in flight together, then probes), not 1 000,
		// each failed on the host's resolution; nothing of A's reached B.
		const rows = await rowsOf(t.a.client.id);
		const tried = rows.filter((r) => aIds.has(r.document_id) && r.attempts > 0);
		console.log(`A's deliveries attempted: ${tried.length}, attempts: ${tried.reduce((n, r) => n + r.attempts, 0)}`);
		expect(tried.length).toBeGreaterThan(0);
		expect(tried.length).toBeLessThan(100);
		for (const r of tried) expect(r).toMatchObject({ status: "pending", last_error: expect.stringMatching(/^resolve: /) });
		expect(rows.filter((r) => aIds.has(r.document_id) && r.status === "pending")).toHaveLength(1000);
		for (const id of aIds) expect(rx.arrived.has(id)).toBe(false);
	}, 120_000);

	test("/metrics counts attempts and failures per config, B's delivery lag, and A's open circuit breaker", async () => {
		const attemptsOf = async (client: string) => (await rowsOf(client)).reduce((n, r) => n + r.attempts, 0);
		const aBefore = await attemptsOf(t.a.client.id);
		const text = (await t.p.http("GET", "/metrics")).text;
		const aAfter = await attemptsOf(t.a.client.id);
		const a = { config: configA, client: t.a.client.id };
		const b = { config: configB, client: t.b.client.id };
		// A: every attempt failed on DNS; the counters match the attempts recorded (read before and after the scrape).
		const aAttempts = value(text, "dispatcher_webhook_attempts_total", a);
		expect(aAttempts).toBeGreaterThanOrEqual(aBefore);
		expect(aAttempts).toBeLessThanOrEqual(aAfter);
		expect(value(text, "dispatcher_webhook_failures_total", { ...a, reason: "dns" })).toBe(aAttempts);
		expect(value(text, "dispatcher_webhook_circuit_open", a)).toBe(1);
		expect(value(text, "dispatcher_webhook_lag_seconds_count", a)).toBeUndefined();
		// B: one attempt per delivery (its config's creation and its 20 notes), no failure, each delivered within 1 s of its change.
		const delivered = (await rowsOf(t.b.client.id)).filter((r) => r.status === "delivered");
		expect(delivered).toHaveLength(B_NOTES + 1);
		expect(value(text, "dispatcher_webhook_attempts_total", b)).toBe(B_NOTES + 1);
		expect(lines(text, "dispatcher_webhook_failures_total", b)).toEqual([]);
		expect(value(text, "dispatcher_webhook_lag_seconds_count", b)).toBe(B_NOTES + 1);
		// Each of B's deliveries within a few seconds (the 1 s bound itself is measured by the test above, per note).
		expect(value(text, "dispatcher_webhook_lag_seconds_bucket", { ...b, le: "5" })).toBe(B_NOTES + 1);
		expect(value(text, "dispatcher_webhook_lag_seconds_sum", b)).toBeLessThan(5 * (B_NOTES + 1));
		expect(lines(text, "dispatcher_webhook_circuit_open", b)).toEqual([]);
		for (const name of ["dispatcher_webhook_attempts_total", "dispatcher_webhook_failures_total", "dispatcher_webhook_lag_seconds", "dispatcher_webhook_circuit_open"])
			expect(text).toContain(`# TYPE ${name} `);
		if (promtool) {
			const r = spawnSync(promtool, ["check", "metrics"], { input: text, encoding: "utf8" });
			expect({ status: r.status, problems: `${r.stdout}${r.stderr}`.trim() }).toEqual({ status: 0, problems: "" });
		}
	});

	test("A's webhook pointed at a working receiver: its breaker closes at once and A's backlog flows", async () => {
		// A's breaker holds A back for at least 5 s more (a probe has failed since it opened: the cooldown doubled).
		const shares = (t.p.broker.getLocalService("dispatcher") as any).shares;
		await waitForValue("A's breaker open for 5 s more", async () => (shares.breakers.get(configA)?.openUntil ?? 0) - Date.now() > 5000, 40_000);
		rxA = await receiver();
		const fixedAt = Date.now();
		await ok(t.as(t.a.admin.token, "PATCH", `/context/configs/${configA}`, { value: { webhook: rxA.url } }), "A's webhook fixed");
		await waitForValue("A's first note at the new receiver", async () => [...aIds].some((id) => rxA!.arrived.has(id)), 20_000);
		const first = Math.min(...[...rxA.arrived.values()]) - fixedAt;
		console.log(`A's first delivery ${first} ms after the fix`);
		expect(first).toBeLessThan(3000);
		// Every note not attempted yet (most of them) follows; those whose retry is later wait for it.
		const waiting = (await rowsOf(t.a.client.id)).filter((r) => aIds.has(r.document_id) && r.attempts > 0).length;
		await waitForValue("A's backlog delivered", async () => [...aIds].filter((id) => rxA!.arrived.has(id)).length >= 1000 - waiting, 60_000);
		const text = (await t.p.http("GET", "/metrics")).text;
		expect(value(text, "dispatcher_webhook_circuit_open", { config: configA, client: t.a.client.id })).toBe(0);
		expect(value(text, "dispatcher_webhook_lag_seconds_count", { config: configA, client: t.a.client.id })).toBeGreaterThanOrEqual(1000 - waiting);
	}, 120_000);
});
