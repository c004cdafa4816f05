/**
 * The operator routes of issue 36 with two tenants, their admins and members, and root (docs/webhooks.md "Deliveries
 * over the API", docs/api.md "The audit trail"):
 * - GET /context/configs/:id/deliveries lists a CQRS config's deliveries, newest first, a page at a time, without payload
 *   or URL; POST .../deliveries/:delivery/redeliver sends a failed one again (409 once it is not failed or disabled);
 * - GET /general/activities/audit lists the audit trail: a tenant's callers their client's entries, root every tenant's;
 * - another tenant's config or delivery answers 404, never its content; bad query parameters 400 in the error shape.
 * A local webhook receiver answers 500 until told otherwise: with one attempt in the retry schedule, the first change
 * of tenant a fails at once (and disables a's config), and its redelivery reaches the receiver.
 */
import http from "http";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

const DELIVERY_KEYS = ["attempts", "created_at", "delivered_at", "document_id", "id", "last_error", "last_status", "next_at", "op", "status", "topic"];
const AUDIT_KEYS = ["action", "aid", "at", "cid", "collection", "document_id", "duration_ms", "id", "ip", "kind", "method", "op", "path", "replayed", "service", "status", "uid"];
const NOT_FOUND = { statusCode: 404, message: "document not found", error: "Not Found" };
const bad = (message: string) => ({ statusCode: 400, message, error: "Bad Request" });

/** A webhook receiver answering `status` (changeable), keeping the document id of every request. */
async function receiver(): Promise<{ status: number; ids: string[]; url: string; close(): Promise<void> }> {
	const r = { status: 500, ids: [] as string[], url: "", close: async () => undefined };
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			r.ids.push(JSON.parse(Buffer.concat(chunks).toString("utf8")).id);
			res.writeHead(r.status).end();
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
	r.url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook?token=hook-query-secret`;
	r.close = async () => {
		server.closeAllConnections();
		await new Promise((done) => server.close(done));
	};
	return r;
}

describe("operator routes: webhook deliveries and the audit trail", () => {
	let t: Tenancy;
	let hookA: Awaited<ReturnType<typeof receiver>>;
	let hookB: Awaited<ReturnType<typeof receiver>>;
	let configA: string;
	let configB: string;
	let noteA: string;
	let noteB: string;

	const deliveriesOf = (token: string, config: string, query = "") => t.as(token, "GET", `/context/configs/${config}/deliveries${query}`);
	const settledOf = (token: string, config: string, status: string) =>
		waitForValue(
			`a ${status} delivery of ${config}`,
			async () => {
				const r = await deliveriesOf(token, config);
				return r.status === 200 && r.body.items.find((d: any) => d.status === status);
			},
			20_000,
		);

	beforeAll(async () => {
		[hookA, hookB] = await Promise.all([receiver(), receiver()]);
		hookB.status = 200;
		// One attempt: a's first failure ends its delivery `failed` (and disables a's config) at once.
		t = await bootTenancy({ webhookAllowPrivate: true, webhookRetrySchedule: [0] });
		const register = async (token: string, url: string) =>
			(await ok(t.as(token, "POST", "/context/configs", { key: "CQRS", value: { webhook: url, authorization: "Bearer hook-auth-secret" } }), "config", 200)).data.id as string;
		configA = await register(t.a.admin.token, hookA.url);
		configB = await register(t.b.admin.token, hookB.url);
		// a's config's own creation (a change of tenant a) fails and disables it: a's note is then recorded `disabled`.
		await waitForValue("a's config disabled", async () => (await t.as(t.a.admin.token, "GET", `/context/configs/${configA}`)).body.data.value.active === false, 20_000);
		noteA = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "a's note" }), "note a", 200)).data.id;
		noteB = (await ok(t.as(t.b.admin.token, "POST", "/content/notes", { title: "b's note" }), "note b", 200)).data.id;
	});
	afterAll(async () => {
		await t?.cleanup();
		await Promise.all([hookA?.close(), hookB?.close()]);
	});

	test("a tenant admin lists its config's deliveries: state, attempts, last error; never the payload, URL or credentials", async () => {
		// The config's own creation is a change of tenant a: its delivery fails (500, one attempt) and disables the config;
		// the config's disabling and the note written since are recorded `disabled` (kept for a redelivery).
		const list = await waitForValue(
			"a's three deliveries",
			async () => {
				const r = await deliveriesOf(t.a.admin.token, configA);
				return r.status === 200 && r.body.items.length === 3 && r.body.items.every((d: any) => d.status !== "pending") && r.body;
			},
			20_000,
		);
		for (const d of list.items) expect(Object.keys(d).sort()).toEqual(DELIVERY_KEYS);
		expect(list.next).toBeNull();
		const [note, disabling, creation] = list.items;
		expect(creation).toMatchObject({
			topic: "context.configs",
			op: "c",
			document_id: configA,
			status: "failed",
			attempts: 1,
			last_status: 500,
			last_error: "gave up after 1 attempts: HTTP 500",
			delivered_at: null,
		});
		const inactive = `config ${configA} is inactive: delivery ${creation.id} failed: gave up after 1 attempts: HTTP 500`;
		expect(note).toMatchObject({ topic: "content.notes", op: "c", document_id: noteA, status: "disabled", attempts: 0, last_status: null, last_error: inactive });
		expect(disabling).toMatchObject({ topic: "context.configs", op: "u", document_id: configA, status: "disabled", attempts: 0, last_error: inactive });
		expect(Number(note.id)).toBeGreaterThan(Number(disabling.id));
		expect(Number(disabling.id)).toBeGreaterThan(Number(creation.id));
		expect(hookA.ids).toEqual([configA]);
		const text = (await deliveriesOf(t.a.admin.token, configA)).text;
		for (const secret of ["hook-query-secret", "hook-auth-secret", "a's note", "127.0.0.1"]) expect(text).not.toContain(secret);
		expect((await deliveriesOf(t.a.admin.token, configA, "?status=delivered")).body).toEqual({ items: [], next: null });
		expect((await deliveriesOf(t.a.admin.token, configA, "?status=failed")).body).toEqual({ items: [creation], next: null });
		expect((await deliveriesOf(t.a.admin.token, configA, "?status=disabled")).body).toEqual({ items: [note, disabling], next: null });
		const b = await settledOf(t.b.admin.token, configB, "delivered");
		expect(b).toMatchObject({ document_id: noteB, status: "delivered", attempts: 1, last_status: 200, last_error: null });
		expect(Date.parse(b.delivered_at)).toBeGreaterThanOrEqual(Date.parse(b.created_at));
	});

	test("another tenant's config answers 404 as a config that does not exist; root sees every tenant's", async () => {
		const absent = "0123456789abcdef01234567";
		for (const [token, config] of [
			[t.b.admin.token, configA],
			[t.a.admin.token, configB],
			[t.a.admin.token, absent],
			[t.a.admin.token, "not-an-id"],
			// Tenant a's member may manage context:* but sees only the configs of its zones (not the admin's).
			[t.a.member.token, configA],
		]) {
			const r = await deliveriesOf(token, config);
			expect([config, r.status, r.body]).toEqual([config, 404, NOT_FOUND]);
		}
		// The member naming the client zone reads a's config, so its deliveries too.
		const zoned = await deliveriesOf(t.a.member.token, configA, "?zone=client");
		expect(zoned.status).toBe(200);
		expect(zoned.body.items).toEqual((await deliveriesOf(t.a.admin.token, configA)).body.items);
		// b's member with the client zone reaches b's config only.
		expect((await deliveriesOf(t.b.member.token, configA, "?zone=client")).body).toEqual(NOT_FOUND);
		const root = await deliveriesOf(t.root, configB);
		expect(root.status).toBe(200);
		expect(root.body.items).toEqual((await deliveriesOf(t.b.admin.token, configB)).body.items);
		expect(root.body.items.map((d: any) => d.document_id)).toContain(noteB);
		// A user without a read grant on context:configs: 403 before any lookup.
		expect((await deliveriesOf(t.a.limited.token, configA)).body).toEqual({ statusCode: 403, message: "no grant for read on context:configs", error: "Forbidden" });
	});

	test("bad query parameters answer 400 naming the fix", async () => {
		const cases: Array<[string, string]> = [
			["?status=gone", "status must be one of pending, delivered, failed, disabled"],
			["?limit=0", "limit must be an integer from 1 to 100"],
			["?limit=101", "limit must be an integer from 1 to 100"],
			["?limit=ten", "limit must be an integer from 1 to 100"],
			["?before=abc", "before must be a delivery id (digits): the previous page's next"],
			["?status=failed&status=delivered", "status must be given once, as a string"],
			["?sort=id", "unknown query parameter sort; accepted: zone, token, status, before, limit"],
		];
		for (const [query, message] of cases) {
			const r = await deliveriesOf(t.a.admin.token, configA, query);
			expect([query, r.status, r.body]).toEqual([query, 400, bad(message)]);
		}
	});

	test("redeliver: only the config's own tenant, only a failed or disabled delivery; the webhook then gets it", async () => {
		const failed = (await deliveriesOf(t.a.admin.token, configA, "?status=failed")).body.items[0];
		const note = (await deliveriesOf(t.a.admin.token, configA, "?status=disabled")).body.items[0];
		const delivered = (await deliveriesOf(t.b.admin.token, configB, "?status=delivered")).body.items[0];
		const redeliver = (token: string, config: string, id: string, body?: unknown) => t.as(token, "POST", `/context/configs/${config}/deliveries/${id}/redeliver`, body);
		const notFound = (id: string) => ({ statusCode: 404, message: `delivery ${id} not found`, error: "Not Found" });
		// b's admin, through a's config or its own, and a's admin naming b's delivery: nothing tells the other exists.
		expect((await redeliver(t.b.admin.token, configA, failed.id)).body).toEqual(NOT_FOUND);
		expect((await redeliver(t.b.admin.token, configB, failed.id)).body).toEqual(notFound(failed.id));
		expect((await redeliver(t.a.admin.token, configA, delivered.id)).body).toEqual(notFound(delivered.id));
		expect((await redeliver(t.a.admin.token, configA, "99999999")).body).toEqual(notFound("99999999"));
		expect((await redeliver(t.a.admin.token, configA, "x1")).body).toEqual({ statusCode: 404, message: "delivery not found: a delivery id is digits", error: "Not Found" });
		expect((await redeliver(t.a.admin.token, configA, failed.id, { force: true })).body).toEqual(bad("redeliver takes no body: the path names the delivery"));
		// b's own delivered one: 409, in the error shape.
		expect((await redeliver(t.b.admin.token, configB, delivered.id)).body).toEqual({
			statusCode: 409,
			message: `delivery ${delivered.id} is delivered: only a failed or disabled delivery can be replayed`,
			error: "Conflict",
		});
		// Nothing was re-queued by the refusals.
		expect((await deliveriesOf(t.a.admin.token, configA, "?status=pending")).body.items).toEqual([]);
		// The failure disabled a's config; the redelivery re-enables it.
		expect((await t.as(t.a.admin.token, "GET", `/context/configs/${configA}`)).body.data.value.active).toBe(false);
		hookA.status = 200;
		const r = await redeliver(t.a.admin.token, configA, failed.id);
		expect(r.status).toBe(200);
		expect(Object.keys(r.body.data).sort()).toEqual(DELIVERY_KEYS);
		expect(r.body.data).toMatchObject({ id: failed.id, document_id: configA, status: "pending", attempts: 0, last_error: null });
		expect((await redeliver(t.a.admin.token, configA, note.id)).body.data).toMatchObject({ id: note.id, document_id: noteA, status: "pending", attempts: 0 });
		const done = await waitForValue(
			"both delivered",
			async () => {
				const items = (await deliveriesOf(t.a.admin.token, configA, "?status=delivered")).body.items;
				return items.some((d: any) => d.id === failed.id) && items.some((d: any) => d.id === note.id) && items;
			},
			20_000,
		);
		expect(done.find((d: any) => d.id === note.id)).toMatchObject({ attempts: 1, last_status: 200, last_error: null });
		expect(hookA.ids).toEqual(expect.arrayContaining([configA, noteA]));
		expect((await t.as(t.a.admin.token, "GET", `/context/configs/${configA}`)).body.data.value.active).not.toBe(false);
		expect((await redeliver(t.a.admin.token, configA, note.id)).status).toBe(409);
		// Root may redeliver any tenant's: a delivered one still answers 409.
		expect((await redeliver(t.root, configB, delivered.id)).status).toBe(409);
	});

	test("pages: newest first, `next` until the last page", async () => {
		for (const title of ["p1", "p2", "p3"]) await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title }), title, 200);
		const all = await waitForValue(
			"every note of a delivered",
			async () => {
				const items = (await deliveriesOf(t.a.admin.token, configA, "?limit=100")).body.items;
				return items.filter((d: any) => d.topic === "content.notes" && d.status === "delivered").length === 4 && items;
			},
			20_000,
		);
		const ids = all.map((d: any) => Number(d.id));
		expect(ids).toEqual([...ids].sort((x, y) => y - x));
		const pages: any[] = [];
		let before = "";
		for (let n = 0; n < 10; n++) {
			const page = (await deliveriesOf(t.a.admin.token, configA, `?limit=3${before}`)).body;
			expect(page.items.length).toBe(page.next === null ? all.length - pages.length : 3);
			pages.push(...page.items);
			if (page.next === null) break;
			expect(page.next).toBe(page.items[2].id);
			before = `&before=${page.next}`;
		}
		expect(pages).toEqual(all);
	});

	test("the audit trail: a tenant sees its client's entries, root every tenant's; filters and bad filters", async () => {
		const audit = (token: string, query: string) => t.as(token, "GET", `/general/activities/audit${query}`);
		// Entries reach the logger through the audit stream: wait for a's note creation.
		const mine = await waitForValue(
			"a's create in the audit trail",
			async () => {
				const r = await audit(t.a.admin.token, "?path=/content/notes&kind=request");
				return r.status === 200 && r.body.items.find((e: any) => e.method === "POST" && e.document_id === noteA);
			},
			20_000,
		);
		expect(Object.keys(mine).sort()).toEqual(AUDIT_KEYS);
		expect(mine).toMatchObject({ kind: "request", path: "/content/notes", action: "content.notes.create", status: 200, uid: t.a.admin.id, cid: t.a.client.id });
		await waitForValue(
			"b's create in the audit trail",
			async () => {
				const r = await audit(t.root, `?path=/content/notes&client=${t.b.client.id}`);
				return r.body.items?.some((e: any) => e.document_id === noteB);
			},
			20_000,
		);
		for (const [who, token, cid] of [
			["a admin", t.a.admin.token, t.a.client.id],
			["a member", t.a.member.token, t.a.client.id],
			["b admin", t.b.admin.token, t.b.client.id],
		] as const) {
			const r = await audit(token, "?limit=100");
			expect([who, r.status]).toEqual([who, 200]);
			expect(r.body.items.length).toBeGreaterThan(0);
			expect([who, [...new Set(r.body.items.map((e: any) => e.cid))]]).toEqual([who, [cid]]);
			expect(r.text).not.toContain(t.a.admin.token.split(".")[2]);
		}
		// b naming a's client, or a's document: nothing.
		expect((await audit(t.b.admin.token, `?client=${t.a.client.id}`)).body).toEqual({ items: [], next: null });
		expect((await audit(t.b.admin.token, "?path=/content/notes&kind=request")).body.items.some((e: any) => e.document_id === noteA)).toBe(false);
		// Root: both tenants, and one tenant's when it names it.
		const rootAll = await audit(t.root, "?path=/content/notes&kind=request&limit=100");
		const docs = rootAll.body.items.map((e: any) => e.document_id);
		expect(docs).toEqual(expect.arrayContaining([noteA, noteB]));
		expect(new Set((await audit(t.root, `?client=${t.a.client.id}&limit=100`)).body.items.map((e: any) => e.cid))).toEqual(new Set([t.a.client.id]));
		// Changes: who changed which document.
		const change = await waitForValue(
			"a's change entry",
			async () => {
				const r = await audit(t.a.admin.token, "?kind=change&action=create");
				return r.body.items?.find((e: any) => e.document_id === noteA);
			},
			20_000,
		);
		expect(change).toMatchObject({ kind: "change", op: "c", service: "content", collection: "notes", uid: t.a.admin.id, cid: t.a.client.id, method: null, path: null });
		// Newest first, and the time range.
		const page = (await audit(t.a.admin.token, "?limit=5")).body;
		const times = page.items.map((e: any) => e.at);
		expect(times).toEqual([...times].sort().reverse());
		expect(page.next).toBe(page.items[4].id);
		const older = (await audit(t.a.admin.token, `?limit=5&before=${page.next}`)).body.items;
		expect(older.length).toBeGreaterThan(0);
		for (const e of older) expect(e.at <= page.items[4].at).toBe(true);
		expect(older.map((e: any) => e.id)).not.toContain(page.items[4].id);
		const future = new Date(Date.now() + 3_600_000).toISOString();
		expect((await audit(t.a.admin.token, `?from=${future}`)).body).toEqual({ items: [], next: null });
		expect((await audit(t.a.admin.token, `?to=${mine.at}&path=/content/notes&kind=request`)).body.items.map((e: any) => e.id)).toContain(mine.id);
		const cases: Array<[string, string]> = [
			["?from=yesterday", "from must be a date and time in ISO 8601 (2026-01-31T12:00:00Z)"],
			[`?from=${future}&to=2020-01-01T00:00:00Z`, "from must not be after to"],
			["?kind=login", "kind must be request or change"],
			["?status=20", "status must be an HTTP status (100 to 599)"],
			["?limit=500", "limit must be an integer from 1 to 100"],
			["?before=-1", "before must be an entry id (digits): the previous page's next"],
			[`?path=${"x".repeat(2001)}`, "path must be 1 to 2000 characters"],
			["?session=s", "unknown query parameter session; accepted: token, from, to, kind, path, action, user, client, status, before, limit"],
		];
		for (const [query, message] of cases) {
			const r = await audit(t.a.admin.token, query);
			expect([query.slice(0, 40), r.status, r.body]).toEqual([query.slice(0, 40), 400, bad(message)]);
		}
	});

	test("the audit trail needs an unnarrowed read grant on general:activities", async () => {
		const audit = (token: string) => t.as(token, "GET", "/general/activities/audit");
		expect((await audit(t.a.limited.token)).body).toEqual({ statusCode: 403, message: "no grant for read on general:activities", error: "Forbidden" });
		// A row filter speaks of activity documents: it cannot narrow the trail, so it does not open it.
		await t.grant(t.a.admin.token, { subject: t.a.limited.subject, action: "read", object: "general:activities", filter: ['{"action": "login"}'] });
		await waitForValue(
			"the narrowed grant in force",
			async () => (await audit(t.a.limited.token)).status === 403 && (await audit(t.a.limited.token)).body.message.startsWith("the audit trail"),
			10_000,
		);
		expect((await audit(t.a.limited.token)).body).toEqual({
			statusCode: 403,
			message: "the audit trail needs a read grant on general:activities without filter or field list: its entries are not activity documents",
			error: "Forbidden",
		});
	});
});
