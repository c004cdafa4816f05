/**
 * Sagas (CONTRACTS.md "Sagas"): start, commit, abort and add with their state rules and idempotence; staged writes
 * of every kind undone by abort and by expiry; a conflicting document left alone; compensation run twice changes
 * nothing more; the authority layer on the special actions.
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";
import { sharedOutbox } from "../../mixins/outbox";
import { sleep, waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

let p: TestPlatform;
let root: string;
const H = (saga: string) => ({ "x-saga-session": saga });

beforeAll(async () => {
	p = await bootPlatform();
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
		const r = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "content/notes", action: "INSERT_MANY", req: { body: { title: "outside" } }, res: { ok: 1 } } });
		expect(r.status).toBe(200);
		expect(r.body.data).toMatchObject({ saga: s.id, bucket: "content/notes", action: "INSERT_MANY", req: { body: { title: "outside" } }, res: { ok: 1 }, state: "external", owner: p.root.user_id });
		expect(r.body.data.images).toBeUndefined();
		const bad = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "nope/none", action: "FIND", req: {} } });
		expect(bad.status).toBe(400);
		expect(bad.body.message).toBe("bucket must be a collection of the catalog (`service/collection`)");
		const badAction = await p.http("POST", "/essential/sagas/add", { token: root, body: { saga: s.id, bucket: "content/notes", action: "DROP", req: {} } });
		expect(badAction.body).toEqual({ statusCode: 400, message: "action must be one of COUNT_DOCUMENTS, INSERT_MANY, FIND_ONE, FIND, FIND_ONE_AND_UPDATE, FIND_ONE_AND_DELETE, UPDATE_MANY", error: "Bad Request" });
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
