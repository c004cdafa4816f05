/**
 * Operating webhooks (issue "Operating it", item 6), on both document stores:
 * - a change written while its client's webhook config was being created (after the config's `created_at`, before
 *   it existed) is not delivered to it: the dispatcher compares stream positions, not times;
 * - a delivery's retries stay on the config it was made for: disabled or deleted, the delivery ends `disabled` and
 *   does not move to the client's other config; `last_status` is the last attempt's (null: no answer);
 * - a failing webhook is logged at info level from its first failure, once per config per minute.
 */
import http from "http";
import { Context } from "moleculer";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { sleep, waitForValue } from "../helpers/wait";

/** A webhook receiver on 127.0.0.1: answers `status`, records the document id and op of every request. */
async function receiver() {
	const server = http.createServer((req, res) => {
		let text = "";
		req.on("data", (c) => (text += c));
		req.on("end", () => {
			const body = JSON.parse(text || "{}");
			rx.hits.push({ id: body.id, op: body.op, status: rx.status });
			res.writeHead(rx.status).end();
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
	const rx = {
		hits: [] as Array<{ id: string; op: string; status: number }>,
		status: 200,
		url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
		got: (id: string) => rx.hits.filter((h) => h.id === id),
		/** Stops listening: later attempts get no answer (connection refused). */
		close: () => new Promise<void>((resolve) => (server.closeAllConnections(), server.close(() => resolve()))),
	};
	return rx;
}

type Row = { id: string; status: string; attempts: number; config_id: string; last_status: number | null; last_error: string | null };
type Attempt = { attempt: number; status: number | null };

/** Every retry 0.3 s apart, never exhausted within a test. */
const FAST_SCHEDULE = [0, ...Array(60).fill(0.3)];

describe("webhook deliveries", () => {
	let p: TestPlatform;
	let token: string;
	const receivers: Array<Awaited<ReturnType<typeof receiver>>> = [];
	const rxOf = async (status = 200) => {
		const rx = await receiver();
		rx.status = status;
		receivers.push(rx);
		return rx;
	};

	beforeAll(async () => {
		p = await bootPlatform({ webhookAllowPrivate: true, webhookRetrySchedule: FAST_SCHEDULE });
		token = await p.rootToken();
	}, 120_000);
	afterAll(async () => {
		jest.restoreAllMocks();
		await p?.cleanup();
		for (const rx of receivers) await rx.close().catch(() => undefined);
	});

	const call = <T = any>(action: string, params: object) => p.broker.call(action, params) as Promise<T>;
	const note = async (title: string) => {
		const r = await p.http("POST", "/content/notes", { token, body: { title } });
		expect(r.status).toBe(200);
		return r.body.data as { id: string; created_at: string };
	};
	const webhook = async (url: string) => {
		const r = await p.http("POST", "/context/configs", { token, body: { key: "CQRS", eid: p.root.client_id, value: { webhook: url } } });
		expect(r.status).toBe(200);
		return r.body.data as { id: string; created_at: string };
	};
	const rowsOf = (docId: string) => call<Row[]>("dispatcher.deliveries", { document_id: docId });
	const dispatcher = () => p.broker.getLocalService("dispatcher") as any;
	/** Every root webhook of an earlier test deleted, its deliveries settled: each test starts with no config. */
	const noWebhooks = async () => {
		const list = await p.http("GET", `/context/configs?query=${encodeURIComponent(JSON.stringify({ key: "CQRS" }))}`, { token });
		for (const c of list.body.items ?? []) expect((await p.http("DELETE", `/context/configs/${c.id}`, { token })).status).toBe(200);
		await waitForValue("no pending delivery", async () => (await call<{ pending: number }>("dispatcher.stats", {})).pending === 0, 20_000);
	};

	test("changes written while the config was being created (after its created_at) are not delivered to it; later ones are", async () => {
		await noWebhooks();
		const rx = await rxOf();
		// The dispatcher holds its next batch until the config exists: it then routes the earlier changes knowing it.
		const svc = dispatcher();
		const ready = svc.ready;
		let openGate!: () => void;
		const gate = new Promise<void>((resolve) => (openGate = resolve));
		svc.ready = function (this: unknown) {
			return gate.then(() => ready.call(this));
		};
		// The config's creation waits in its hook (after `created_at` is stamped, before it is written).
		let entered = false;
		let release!: () => void;
		const held = new Promise<void>((resolve) => (release = resolve));
		const original = Context.prototype.call;
		const spy = jest.spyOn(Context.prototype, "call").mockImplementation(function (this: Context, action: string, ...rest: unknown[]) {
			if (action === "domain.clients.authenticate" && /^context\.configs\./.test(this.action?.name ?? "") && !entered) {
				entered = true;
				return held.then(() => (original as any).call(this, action, ...rest));
			}
			return (original as any).call(this, action, ...rest);
		} as any);
		try {
			const creating = webhook(rx.url);
			await waitForValue("the config's creation under way", async () => entered);
			const during = [await note("during 1"), await note("during 2")];
			release();
			const config = await creating;
			// The precondition of the bug: both were written after the config's created_at.
			for (const n of during) expect(n.created_at > config.created_at).toBe(true);
			const after = await note("after");
			openGate();
			await waitForValue("the later change delivered", async () => rx.got(after.id).length === 1);
			await waitForValue("the config's own creation delivered", async () => rx.got(config.id).length === 1);
			await waitForValue("the dispatcher idle", async () => (await call<{ pending: number }>("dispatcher.stats", {})).pending === 0);
			for (const n of during) {
				expect(rx.got(n.id)).toEqual([]);
				expect(await rowsOf(n.id)).toEqual([]);
			}
			expect((await rowsOf(after.id)).map((r) => [r.status, r.config_id])).toEqual([["delivered", config.id]]);
		} finally {
			spy.mockRestore();
			release();
			openGate();
			svc.ready = ready;
		}
	}, 60_000);

	test("retries stay on their config: disabled or deleted, the delivery ends and never moves to the client's other config", async () => {
		await noWebhooks();
		const rxOther = await rxOf(200);
		const rxA = await rxOf(500);
		await webhook(rxOther.url);
		// Created last: the client's webhook (the active config most recently updated).
		const a = await webhook(rxA.url);
		const n = await note("for A");
		const [row] = await waitForValue("two failed attempts on A", async () => {
			const rows = await rowsOf(n.id);
			return rows.length === 1 && rows[0].attempts >= 2 && rows;
		});
		expect(row).toMatchObject({ status: "pending", config_id: a.id, last_status: 500 });
		// A's receiver goes away: its next attempt gets no answer.
		await rxA.close();
		await waitForValue("an attempt without an answer", async () => {
			const list = (await call<{ attempts_list: Attempt[] }>("dispatcher.delivery", { id: row.id })).attempts_list;
			return list.length > 2 && list[list.length - 1].status === null;
		});
		await call("context.configs.cqrsActive", { id: a.id, active: false, reason: "operator" });
		const ended = await waitForValue("the delivery ended", async () => {
			const [r] = await rowsOf(n.id);
			return r.status !== "pending" && r;
		});
		expect(ended).toMatchObject({ status: "disabled", config_id: a.id, last_status: null });
		expect(ended.last_error).toMatch(new RegExp(`config ${a.id}`));
		// New changes go to the client's webhook now in use; the ended delivery never went there.
		const later = await note("for the other config");
		await waitForValue("the later change on the other config", async () => rxOther.got(later.id).length === 1);
		expect(rxOther.got(n.id)).toEqual([]);

		// Deleted instead of disabled: the same.
		const rxB = await rxOf(500);
		const b = await webhook(rxB.url);
		const m = await note("for B");
		const [mrow] = await waitForValue("a failed attempt on B", async () => {
			const rows = await rowsOf(m.id);
			return rows.length === 1 && rows[0].attempts >= 1 && rows;
		});
		expect(mrow.config_id).toBe(b.id);
		expect((await p.http("DELETE", `/context/configs/${b.id}`, { token })).status).toBe(200);
		const gone = await waitForValue("the delivery ended", async () => {
			const [r] = await rowsOf(m.id);
			return r.status !== "pending" && r;
		});
		expect(gone).toMatchObject({ status: "disabled", config_id: b.id, last_status: 500 });
		await sleep(700);
		expect(rxOther.got(m.id)).toEqual([]);
	}, 90_000);

	test("a failing webhook is logged at info level from its first failure, once per config per minute", async () => {
		await noWebhooks();
		const rx = await rxOf(503);
		const info = jest.spyOn(dispatcher().logger, "info");
		const config = await webhook(rx.url);
		const n = await note("failing");
		await waitForValue("three failed attempts", async () => rx.got(n.id).length >= 3);
		const lines = info.mock.calls.map((c) => String(c[0])).filter((l) => l.includes(`CQRS config ${config.id} `));
		expect(lines).toHaveLength(1);
		expect(lines[0]).toMatch(
			new RegExp(`webhook of CQRS config ${config.id} \\(client ${p.root.client_id}\\) is failing: HTTP 503 \\(delivery \\d+, attempt 1; next attempt in \\d+ s\\)`),
		);
		info.mockRestore();
	}, 60_000);
});
