/**
 * Sagas (docs/contracts.md "Sagas"): start, commit, abort and add with their state rules and idempotence; staged writes
 * of every kind undone by abort and by expiry; a conflicting document left alone; compensation run twice changes
 * nothing more; the authority layer on the special actions.
 */
import { randomBytes } from "crypto";
import { bootPlatform, dataDirHoldingOutbox, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";
import { sharedOutbox } from "../../events/outbox";
import { sleep, waitForValue } from "../helpers/wait";
import { DOMAINS } from "../../catalog";

jest.setTimeout(120_000);

let p: TestPlatform;
let root: string;
const H = (saga: string) => ({ "x-saga-session": saga });

beforeAll(async () => {
	// Every change event stays readable (eventsOf reads the outbox from its start).
	p = await bootPlatform({ dataDir: dataDirHoldingOutbox() });
	root = await p.rootToken();
}, 60_000);
afterAll(async () => {
	await p?.cleanup();
});

async function start(token = root, ttl = 60) {
	const r = await p.http("POST", "/essential/sagas/start", { token, body: { ttl } });
	expect(r.status).toBe(200);
	return r.body.data;
}

const notes = (q: Record<string, unknown>, extra = "") => `/content/notes?query=${encodeURIComponent(JSON.stringify(q))}${extra}`;

async function note(id: string) {
	const r = await p.http("GET", `/content/notes/${id}`, { token: root, headers: { "x-exclude-soft-delete-query": "1" } });
	return r.status === 200 ? r.body.data : null;
}

async function eventsOf(id: string) {
	const all = await sharedOutbox(p.cfg).readFrom(0, 1_000_000);
	return all.filter((r) => r.event.id === id).map((r) => r.event.op);
}

describe("saga operations", () => {
	test("start answers an AWAITING saga owned by the caller with job, session, ttl and expires_at", async () => {
		const before = Date.now();
		const s = await start(root, 30);
		expect(s).toMatchObject({ state: "AWAITING", ttl: 30, version: "1.0.0", deleted_at: null });
		expect(s.id).toMatch(/^[0-9a-f]{24}$/);
		expect(s.job).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
		expect(s.session).toBe(JSON.parse(Buffer.from(root.split(".")[1], "base64url").toString()).session);
		expect(s.owner).toBe(p.root.user_id);
		const exp = Date.parse(s.expires_at);
		expect(exp).toBeGreaterThanOrEqual(before + 30_000 - 50);
		expect(exp).toBeLessThanOrEqual(Date.now() + 30_000 + 50);
		expect(s.images).toBeUndefined();
	});

	test.each([
		[{ ttl: 4 }, "ttl must be an integer between 5 and 900"],
		[{ ttl: 901 }, "ttl must be an integer between 5 and 900"],
		[{ ttl: 10.5 }, "ttl must be an integer between 5 and 900"],
		[{ ttl: "10" }, "ttl must be an integer between 5 and 900"],
		[{}, "ttl is required"],
		[{ ttl: 10, state: "COMMITTED" }, "state is not allowed"],
	])("start %j answers 400", async (body, message) => {
		const r = await p.http("POST", "/essential/sagas/start", { token: root, body });
		expect(r.status).toBe(400);
		expect(r.body).toEqual({ statusCode: 400, message, error: "Bad Request" });
	});

	test("commit: COMMITTED with committed_at; repeated, the same; abort then 409 and state unchanged", async () => {
		const s = await start();
		const c1 = await p.http("GET", `/essential/sagas/${s.id}/commit`, { token: root });
		expect(c1.status).toBe(200);
		expect(c1.body.data).toMatchObject({ id: s.id, state: "COMMITTED" });
		expect(Date.parse(c1.body.data.committed_at)).toBeGreaterThan(0);
		const c2 = await p.http("GET", `/essential/sagas/${s.id}/commit`, { token: root });
		expect(c2.status).toBe(200);
		expect(c2.body.data).toEqual(c1.body.data);
		const a = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a.status).toBe(409);
		expect(a.body).toEqual({ statusCode: 409, message: `saga ${s.id} is not in flight`, error: "Conflict" });
		expect((await p.http("GET", `/essential/sagas/${s.id}`, { token: root })).body.data).toEqual(c1.body.data);
	});

	test("abort: ABORTED with aborted_at; repeated, the same; commit then 409 and state unchanged", async () => {
		const s = await start();
		const a1 = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a1.status).toBe(200);
		expect(a1.body.data).toMatchObject({ id: s.id, state: "ABORTED", abort_reason: "abort" });
		expect(Date.parse(a1.body.data.aborted_at)).toBeGreaterThan(0);
		const a2 = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a2.status).toBe(200);
		expect(a2.body.data).toEqual(a1.body.data);
		const c = await p.http("GET", `/essential/sagas/${s.id}/commit`, { token: root });
		expect(c.status).toBe(409);
		expect(c.body).toEqual({ statusCode: 409, message: `saga ${s.id} is not in flight`, error: "Conflict" });
		expect((await p.http("GET", `/essential/sagas/${s.id}`, { token: root })).body.data.state).toBe("ABORTED");
	});

	test("commit and abort of an unknown or malformed id answer 404", async () => {
		for (const id of ["0123456789abcdef01234567", "nope"]) {
			for (const op of ["commit", "abort"]) {
				const r = await p.http("GET", `/essential/sagas/${id}/${op}`, { token: root });
				expect(r.status).toBe(404);
				expect(r.body).toEqual({ statusCode: 404, message: "document not found", error: "Not Found" });
			}
		}
	});

	test("add records an external stage; a saga not in flight answers 409, an unknown one 404, a bad body 400", async () => {
		const s = await start();
		const r = await p.http("POST", "/essential/sagas/add", {
			token: root,
			body: { saga: s.id, bucket: "content/notes", action: "INSERT_MANY", req: { body: { title: "outside" } }, res: { ok: 1 } },
		});
		expect(r.status).toBe(200);
		expect(r.body.data).toMatchObject({
			saga: s.id,
			bucket: "content/notes",
			action: "INSERT_MANY",
			req: { body: { title: "outside" } },
			res: { ok: 1 },
			state: "external",
			owner: p.root.user_id,
		});
		expect(r.body.data.images).toBeUndefined();
		const bad = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "nope/none", action: "FIND", req: {} } });
		expect(bad.status).toBe(400);
		expect(bad.body.message).toBe("bucket must be a collection of the catalog (`service/collection`)");
		const badAction = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "content/notes", action: "DROP", req: {} } });
		expect(badAction.body).toEqual({
			statusCode: 400,
			message: "action must be one of COUNT_DOCUMENTS, INSERT_MANY, FIND_ONE, FIND, FIND_ONE_AND_UPDATE, FIND_ONE_AND_DELETE, UPDATE_MANY",
			error: "Bad Request",
		});
		const unknown = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: "0123456789abcdef01234567", bucket: "content/notes", action: "FIND", req: {} } });
		expect(unknown.body).toEqual({ statusCode: 404, message: "saga 0123456789abcdef01234567 not found", error: "Not Found" });
		// The external stage is not undone by the platform: abort succeeds and leaves it as it was.
		const a = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a.status).toBe(200);
		const late = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "content/notes", action: "FIND", req: {} } });
		expect(late.body).toEqual({ statusCode: 409, message: `saga ${s.id} is not in flight`, error: "Conflict" });
		const st = await p.http("GET", `/essential/saga-stages/${r.body.data.id}`, { token: root });
		expect(st.body.data.state).toBe("external");
	});
});

/** Every write kind staged in one saga; returns what to check after compensation. */
async function stagedWrites(saga: string, tag: string) {
	// Documents that exist before the saga.
	const pre = [];
	for (const n of [1, 2, 3, 4, 5]) {
		const r = await p.http("POST", "/content/notes", { token: root, body: { title: `${tag}-pre-${n}`, content: "before" } });
		expect(r.status).toBe(200);
		pre.push(r.body.data);
	}
	const deletedBefore = await p.http("DELETE", `/content/notes/${pre[3].id}`, { token: root });
	expect(deletedBefore.status).toBe(200);
	const preImages = await Promise.all(pre.map((d) => note(d.id)));

	const created = await p.http("POST", "/content/notes", { token: root, headers: H(saga), body: { title: `${tag}-created` } });
	expect(created.status).toBe(200);
	expect(created.headers.get("x-saga-session")).toBe(saga);
	const bulk = await p.http("POST", "/content/notes/bulk", { token: root, headers: H(saga), body: { items: [{ title: `${tag}-bulk-1` }, { title: `${tag}-bulk-2` }] } });
	expect(bulk.status).toBe(200);
	const patched = await p.http("PATCH", `/content/notes/${pre[0].id}`, { token: root, headers: H(saga), body: { content: "changed", description: "new field" } });
	expect(patched.status).toBe(200);
	const bulkPatched = await p.http("PATCH", `/content/notes/bulk?query=${encodeURIComponent(JSON.stringify({ title: { $in: [`${tag}-pre-2`, `${tag}-pre-3`] } }))}`, {
		token: root,
		headers: H(saga),
		body: { content: "bulk changed" },
	});
	expect(bulkPatched.status).toBe(200);
	expect(bulkPatched.body.total).toBe(2);
	const removed = await p.http("DELETE", `/content/notes/${pre[1].id}`, { token: root, headers: H(saga) });
	expect(removed.status).toBe(200);
	const restored = await p.http("PUT", `/content/notes/${pre[3].id}/restore`, { token: root, headers: H(saga) });
	expect(restored.status).toBe(200);
	const destroyed = await p.http("DELETE", `/content/notes/${pre[4].id}/destroy`, { token: root, headers: H(saga) });
	expect(destroyed.status).toBe(200);
	// A read is a stage too.
	const read = await p.http("GET", notes({ title: `${tag}-created` }), { token: root, headers: H(saga) });
	expect(read.status).toBe(200);
	expect(read.headers.get("x-saga-session")).toBe(saga);

	const inserted = [created.body.data.id, ...bulk.body.items.map((d: any) => d.id)];
	expect(await note(inserted[0])).not.toBeNull();
	return { pre, preImages, inserted };
}

async function expectUndone(x: Awaited<ReturnType<typeof stagedWrites>>) {
	for (const id of x.inserted) expect(await note(id)).toBeNull();
	for (let i = 0; i < x.pre.length; i++) expect(await note(x.pre[i].id)).toEqual(x.preImages[i]);
}

describe("staged writes", () => {
	test("create, bulk create, patch, bulk patch, delete, restore and destroy are each undone by abort, with their change events", async () => {
		const s = await start();
		const x = await stagedWrites(s.id, `ab-${randomBytes(3).toString("hex")}`);
		const stages = await p.http(
			"GET",
			`/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga: s.id }))}&pagination=${encodeURIComponent(JSON.stringify({ limit: 100, sort: { created_at: 1 } }))}`,
			{ token: root },
		);
		expect(stages.status).toBe(200);
		expect(stages.body.items.map((st: any) => st.action)).toEqual([
			"INSERT_MANY",
			"INSERT_MANY",
			"FIND_ONE_AND_UPDATE",
			"UPDATE_MANY",
			"FIND_ONE_AND_UPDATE",
			"FIND_ONE_AND_UPDATE",
			"FIND_ONE_AND_DELETE",
			"FIND",
		]);
		expect(stages.body.items.every((st: any) => st.state === "done" && st.bucket === "content/notes" && st.images === undefined)).toBe(true);
		expect(stages.body.items[0].req).toMatchObject({ body: { title: expect.stringMatching(/-created$/) } });
		expect(stages.body.items[0].res).toMatchObject({ data: { id: x.inserted[0] } });

		const a = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a.status).toBe(200);
		expect(a.body.data.state).toBe("ABORTED");
		await expectUndone(x);
		// Each undo has its change event: the inserted note c then d; the destroyed one d then c again.
		expect(await eventsOf(x.inserted[0])).toEqual(["c", "d"]);
		expect(await eventsOf(x.pre[4].id)).toEqual(["c", "d", "c"]);
		// pre-2 was bulk patched, then deleted: undone newest first (restore, then the patch).
		expect(await eventsOf(x.pre[1].id)).toEqual(["c", "u", "d", "r", "u"]);
		expect(await eventsOf(x.pre[2].id)).toEqual(["c", "u", "u"]);
		expect(await eventsOf(x.pre[3].id)).toEqual(["c", "d", "r", "d"]);
		expect(await eventsOf(x.pre[0].id)).toEqual(["c", "u", "u"]);
		const after = await p.http(
			"GET",
			`/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga: s.id }))}&pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`,
			{ token: root },
		);
		expect(after.body.items.map((st: any) => st.state).sort()).toEqual([...Array(8).fill("compensated")]);

		// Compensation run again (a retry, another node) changes nothing more.
		const svc: any = p.broker.getLocalService("essential");
		const { abortSaga } = await import("../../services/essential/sagas");
		const stored = await svc.collectionStore("saga-stages").find({ query: { saga: s.id } });
		const countBefore = (await sharedOutbox(p.cfg).readFrom(0, 1_000_000)).length;
		for (const st of stored) await p.broker.call(`content.notes.settle`, { images: st.images, reason: "abort" });
		await abortSaga(svc, { meta: {}, call: p.broker.call.bind(p.broker), locals: {}, service: svc } as any, s.id, "abort");
		expect((await sharedOutbox(p.cfg).readFrom(0, 1_000_000)).length).toBe(countBefore);
		await expectUndone(x);
	});

	test("a document someone else changed after the stage is left alone; the stage records conflict and the rest is undone", async () => {
		const s = await start();
		const mine = await p.http("POST", "/content/notes", { token: root, headers: H(s.id), body: { title: "conflict-created" } });
		const other = await p.http("POST", "/content/notes", { token: root, body: { title: "conflict-pre" } });
		const patched = await p.http("PATCH", `/content/notes/${other.body.data.id}`, { token: root, headers: H(s.id), body: { content: "by the saga" } });
		expect(patched.status).toBe(200);
		await sleep(5);
		// Someone else (no header) changes both afterwards.
		const later = await p.http("PATCH", `/content/notes/${other.body.data.id}`, { token: root, body: { content: "by someone else" } });
		expect(later.status).toBe(200);
		const a = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a.status).toBe(200);
		expect(await note(other.body.data.id)).toEqual(later.body.data);
		expect(await note(mine.body.data.id)).toBeNull();
		const stages = await p.http("GET", `/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga: s.id }))}`, { token: root });
		const byAction = Object.fromEntries(stages.body.items.map((st: any) => [st.action, st]));
		expect(byAction.FIND_ONE_AND_UPDATE).toMatchObject({ state: "conflict", conflict: true });
		expect(byAction.INSERT_MANY).toMatchObject({ state: "compensated", conflict: false });
	});

	test("a write with a saga that is committed, aborted, expired, unknown or someone else's is refused before it applies", async () => {
		const committed = await start();
		await p.http("GET", `/essential/sagas/${committed.id}/commit`, { token: root });
		const aborted = await start();
		await p.http("GET", `/essential/sagas/${aborted.id}/abort`, { token: root });
		for (const id of [committed.id, aborted.id]) {
			const title = `refused-${randomBytes(3).toString("hex")}`;
			const r = await p.http("POST", "/content/notes", { token: root, headers: H(id), body: { title } });
			expect(r.body).toEqual({ statusCode: 409, message: `saga ${id} is not in flight`, error: "Conflict" });
			expect((await p.http("GET", notes({ title }), { token: root })).body.total).toBe(0);
		}
		// Someone else's saga: 404, as if it did not exist.
		const username = `sg-${randomBytes(4).toString("hex")}`;
		await createUser(p.http, root, { username, password: "pw-saga-user-1", subjects: [] });
		for (const [action, object] of [
			["write", "content:notes"],
			["start", "essential:sagas"],
		])
			expect((await p.http("POST", "/auth/grants", { token: root, body: { subject: `${username}@${p.root.domain}`, action, object } })).status).toBe(200);
		const t = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-saga-user-1" })).access_token;
		const mine = await start();
		const r = await p.http("POST", "/content/notes", { token: t, headers: H(mine.id), body: { title: "not yours" } });
		expect(r.body).toEqual({ statusCode: 404, message: `saga ${mine.id} not found`, error: "Not Found" });
		const unknown = await p.http("POST", "/content/notes", { token: root, headers: H("nope"), body: { title: "x" } });
		expect(unknown.body).toEqual({ statusCode: 404, message: "saga nope not found", error: "Not Found" });
		// Its own saga works; another's commit/abort answers 404 (not in its view).
		const own = await p.http("POST", "/essential/sagas/start", { token: t, body: { ttl: 10 } });
		expect(own.status).toBe(200);
		expect((await p.http("POST", "/content/notes", { token: t, headers: H(own.body.data.id), body: { title: "yours" } })).status).toBe(200);
		expect((await p.http("GET", `/essential/sagas/${mine.id}/abort`, { token: t })).status).toBe(403); // no abort grant
		expect((await p.http("POST", "/auth/grants", { token: root, body: { subject: `${username}@${p.root.domain}`, action: "abort", object: "essential:sagas" } })).status).toBe(200);
		await sleep(100);
		const other = await p.http("GET", `/essential/sagas/${mine.id}/abort`, { token: t });
		expect(other.body).toEqual({ statusCode: 404, message: "document not found", error: "Not Found" });
		expect((await p.http("GET", `/essential/sagas/${own.body.data.id}/abort`, { token: t })).body.data.state).toBe("ABORTED");
	});

	test("the special actions pass the authority layer: scope, then a grant for that action", async () => {
		const username = `sc-${randomBytes(4).toString("hex")}`;
		await createUser(p.http, root, { username, password: "pw-saga-user-2", subjects: [] });
		const t = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-saga-user-2" })).access_token;
		const noGrant = await p.http("POST", "/essential/sagas/start", { token: t, body: { ttl: 10 } });
		expect(noGrant.body).toEqual({ statusCode: 403, message: "no grant for start on essential:sagas", error: "Forbidden" });
		const scoped = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-saga-user-2", scopes: ["read:content:notes"] }))
			.access_token;
		const noScope = await p.http("POST", "/essential/sagas/start", { token: scoped, body: { ttl: 10 } });
		expect(noScope.body).toEqual({ statusCode: 403, message: "token scope does not cover start:essential:sagas", error: "Forbidden" });
		// A fixed segment never falls through to GET /:id.
		expect((await p.http("GET", "/essential/sagas/start", { token: root })).status).toBe(404);
		// Specials without a handler stay unrouted.
		for (const d of DOMAINS)
			for (const c of d.collections)
				for (const sp of (c.specials ?? []).filter((x) => !x.implemented))
					expect(
						(await p.http(sp.method, `/${d.name}/${c.name}/${sp.path.replace(":id", "0123456789abcdef01234567")}`, { token: root, body: sp.method === "GET" ? undefined : {} }))
							.status,
					).toBe(404);
	});
});

describe("expiry", () => {
	test("a saga whose ttl (5 s) passes while AWAITING is compensated by the watcher and ABORTED within 15 s; every write kind undone", async () => {
		const s = await start(root, 5);
		const x = await stagedWrites(s.id, `ex-${randomBytes(3).toString("hex")}`);
		const expiresAt = Date.parse(s.expires_at);
		const done = await waitForValue(
			"the expired saga compensated",
			async () => {
				const r = await p.http("GET", `/essential/sagas/${s.id}`, { token: root });
				return r.body.data.state === "ABORTED" ? r.body.data : null;
			},
			25_000,
		);
		expect(done).toMatchObject({ state: "ABORTED", abort_reason: "expiry" });
		expect(Date.parse(done.aborted_at) - expiresAt).toBeLessThan(15_000);
		await expectUndone(x);
		// Committing it now: 409.
		expect((await p.http("GET", `/essential/sagas/${s.id}/commit`, { token: root })).body).toEqual({
			statusCode: 409,
			message: `saga ${s.id} is not in flight`,
			error: "Conflict",
		});
	});

	test("several watchers scanning at once compensate each saga once (one undo event per document, one ABORTED change per saga)", async () => {
		const sagas: any[] = [];
		const created: string[] = [];
		for (let i = 0; i < 5; i++) {
			const s = await start(root, 5);
			sagas.push(s);
			const c = await p.http("POST", "/content/notes", { token: root, headers: H(s.id), body: { title: `w2-${i}` } });
			created.push(c.body.data.id);
		}
		await sleep(Math.max(0, Date.parse(sagas[sagas.length - 1].expires_at) - Date.now() + 20));
		// The platform's own watcher plus four more scans racing it.
		await Promise.all(Array.from({ length: 4 }, () => p.broker.call("essential.sagas.expire", { limit: 100 })));
		await waitForValue(
			"all compensated",
			async () => {
				const r = await p.http("GET", `/essential/sagas?query=${encodeURIComponent(JSON.stringify({ id: { $in: sagas.map((s) => s.id) }, state: "ABORTED" }))}`, { token: root });
				return r.body.total === sagas.length;
			},
			20_000,
		);
		for (const id of created) expect(await eventsOf(id)).toEqual(["c", "d"]);
		const all = await sharedOutbox(p.cfg).readFrom(0, 1_000_000);
		for (const s of sagas) expect(all.filter((r) => r.event.id === s.id && r.event.after?.state === "ABORTED").length).toBe(1);
	});
});

describe("the raw pattern cannot bypass the saga rules", () => {
	test("a patch of state, ttl, job or session answers 400; expires_at and stage states are set by the platform only", async () => {
		const s = await start();
		await p.http("GET", `/essential/sagas/${s.id}/commit`, { token: root });
		for (const [k, v] of [
			["state", "AWAITING"],
			["ttl", 600],
			["job", "00000000-0000-4000-8000-000000000000"],
			["session", "ab"],
		] as const) {
			const r = await p.http("PATCH", `/essential/sagas/${s.id}`, { token: root, body: { [k]: v } });
			expect(r.body).toEqual({ statusCode: 400, message: `${k} is managed by the saga operations (start, commit, abort)`, error: "Bad Request" });
		}
		const bulk = await p.http("PATCH", `/essential/sagas/bulk?query=${encodeURIComponent(JSON.stringify({ id: s.id }))}`, { token: root, body: { state: "AWAITING" } });
		expect(bulk.status).toBe(400);
		const exp = await p.http("PATCH", `/essential/sagas/${s.id}`, { token: root, body: { expires_at: new Date(Date.now() + 1e6).toISOString() } });
		expect(exp.body).toEqual({ statusCode: 400, message: "expires_at is set by the platform", error: "Bad Request" });
		expect((await p.http("GET", `/essential/sagas/${s.id}`, { token: root })).body.data.state).toBe("COMMITTED");
		const add = await p.http("POST", "/essential/saga-stages", { token: root, body: { saga: s.id, bucket: "content/notes", action: "FIND", req: {}, state: "compensated" } });
		expect(add.body).toEqual({ statusCode: 400, message: "state is set by the platform", error: "Bad Request" });
	});
});

describe("write-ahead stages", () => {
	test("a pending stage (crash between stage and write, or between write and answer) is compensated by inspecting the documents", async () => {
		const s = await start();
		const claims = JSON.parse(Buffer.from(root.split(".")[1], "base64url").toString());
		const meta = { token: claims };
		const { platformDoc } = await import("../../engine/collection.mixin");
		const { stampOf } = await import("../../engine/saga-staging");
		const notesStore = (p.broker.getLocalService("content") as any).collectionStore("notes");
		// 1: the stage was recorded, the process died before the write: nothing to undo.
		const never = platformDoc({ title: "never written" }, { owner: claims.uid, cid: claims.cid });
		const b1: any = await p.broker.call(
			"essential.saga-stages.begin",
			{ saga: s.id, bucket: "content/notes", action: "INSERT_MANY", req: {}, images: [{ kind: "insert", id: never.id, after: stampOf(never) }] },
			{ meta },
		);
		await p.broker.call("essential.saga-stages.complete", { stage: b1.stage, lease: b1.lease, res: null }, { meta });
		// 2: the write happened, the process died before completing the stage (the lease is released by its TTL; here by hand).
		const written = platformDoc({ title: "written, never acknowledged" }, { owner: claims.uid, cid: claims.cid });
		const b2: any = await p.broker.call(
			"essential.saga-stages.begin",
			{ saga: s.id, bucket: "content/notes", action: "INSERT_MANY", req: {}, images: [{ kind: "insert", id: written.id, after: stampOf(written) }] },
			{ meta },
		);
		await notesStore.insert(written);
		const { releaseLease } = await import("../../runtime/lock");
		const { kvOf } = await import("../helpers/auth");
		await releaseLease(kvOf(p), `saga:${s.id}`, b2.lease);
		const stored = await (p.broker.getLocalService("essential") as any).collectionStore("saga-stages").findOne({ id: b2.stage });
		expect(stored.state).toBe("pending");

		const a = await p.http("GET", `/essential/sagas/${s.id}/abort`, { token: root });
		expect(a.status).toBe(200);
		expect(await notesStore.findOne({ id: written.id })).toBeNull();
		expect(await notesStore.findOne({ id: never.id })).toBeNull();
		const stages = await p.http("GET", `/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga: s.id }))}`, { token: root });
		expect(stages.body.items.map((x: any) => x.state).sort()).toEqual(["compensated", "compensated"]);
	});
});
