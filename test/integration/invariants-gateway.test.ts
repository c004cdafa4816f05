/**
 * Gateway invariants, on both document stores, with two tenants (test/helpers/tenants.ts):
 * - a truncated multipart upload answers 400 to its sender and the process keeps serving every tenant;
 * - `?zone=` reaches every special action as it reaches GET (a payer pays an invoice it sees with `?zone=client`);
 *   `POST /special/stats/collect` answers the tenant's stats without a zone;
 * - CSRF: a cookie-authenticated request that changes state from another site answers 403; bearer requests,
 *   reads and same-site requests are unaffected (docs/security.md, "Cross-site requests");
 * - METRICS_TOKEN: `/metrics` needs that bearer when it is set, on the gateway and on the ops ports.
 */
import http from "http";
import type { AddressInfo } from "net";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { withStatusProbe } from "../helpers/status-probe";
import { errorBody } from "../helpers/auth";
import { eventually, waitForValue } from "../helpers/wait";
import { opsHandler } from "../../runtime/ops-server";
import { metricsToken } from "../../runtime/config";
import { head, rawRequest } from "../helpers/raw-http";

jest.setTimeout(180_000);

const METRICS_TOKEN = "metrics-token-of-the-invariants-suite";
const CSRF = "cross-site request refused: a request authenticated by cookie that changes state must come from this site (send the token in the Authorization header instead)";

/** The truncated body of finding 2: it ends inside the file part. */
const TRUNCATED = `--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc`;

describe("gateway invariants", () => {
	let t: Tenancy;
	let port = 0;
	beforeAll(async () => {
		t = await bootTenancy({ metricsToken: METRICS_TOKEN } as any);
		port = Number(new URL(t.p.url).port);
	}, 180_000);
	afterAll(async () => {
		await t?.cleanup();
	});
	withStatusProbe(() => t.p.url);

	const upload = (token: string, body: string, boundary = "b", extra: Record<string, string> = {}) =>
		rawRequest(
			port,
			head(port, "POST", "/special/files/upload", {
				Authorization: token ? `Bearer ${token}` : undefined,
				"Content-Type": `multipart/form-data; boundary=${boundary}`,
				"Content-Length": Buffer.byteLength(body),
				...extra,
			}),
			{ chunks: [body] },
		);
	const GOOD = `--b\r\nContent-Disposition: form-data; name="file"; filename="ok.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n`;

	describe("finding 2: a truncated multipart upload", () => {
		test("answers 400 to its sender; the process keeps serving both tenants", async () => {
			const r = await upload(t.a.admin.token, TRUNCATED);
			expect(r).toEqual({ status: 400, body: errorBody(400, "body is not valid multipart/form-data: Unexpected end of form") });
			// A body cut inside the part headers, and one that never closes its last boundary.
			const cut = await upload(t.a.member.token, `--b\r\nContent-Disposition: form-da`);
			expect(cut).toEqual({ status: 400, body: errorBody(400, expect.stringMatching(/^body is not valid multipart\/form-data: /)) });
			const open = await upload(t.b.admin.token, `--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nabc\r\n--b`);
			expect(open).toEqual({ status: 400, body: errorBody(400, expect.stringMatching(/^body is not valid multipart\/form-data: /)) });
			expect((await t.p.http("GET", "/status")).status).toBe(200);
			for (const who of [t.a.admin, t.b.admin]) {
				const good = await upload(who.token, GOOD);
				expect(good.status).toBe(200);
				expect(good.body).toMatchObject({ items: [{ name: "ok.txt", size: 5 }], total: 1 });
			}
		});
	});

	describe("finding 14: ?zone= on special actions; collect's default", () => {
		test("a payer pays an invoice it sees with ?zone=client, as with x-zone; another tenant's payer still gets 404", async () => {
			const { a, b, as, grant } = t;
			const invoice = async () => (await ok(as(a.admin.token, "POST", "/financial/invoices", { amount: 10, currency: "USD", status: "ISSUED" }), "invoice")).data.id as string;
			const i1 = await invoice();
			const i2 = await invoice();
			// The member sees the admin's invoice through the client zone only.
			expect((await as(a.member.token, "GET", `/financial/invoices/${i1}`)).status).toBe(404);
			expect((await as(a.member.token, "GET", `/financial/invoices/${i1}?zone=client`)).status).toBe(200);
			await grant(a.admin.token, { subject: a.member.subject, action: "payment", object: "financial:invoices" });
			const wallet = (await waitForValue("the member's wallet", async () => (await as(a.member.token, "GET", "/financial/wallets")).body.items?.[0]?.id)) as string;
			await waitForValue("the admin's wallet", async () => (await as(a.admin.token, "GET", "/financial/wallets")).body.items?.[0]?.id);
			const dep = await ok(as(a.admin.token, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount: 100, payees: [{ wallet, amount: 100 }] }), "deposit");
			await ok(as(a.admin.token, "GET", `/financial/transactions/${dep.data.id}/verify`), "verify the deposit");

			const byQuery = await as(a.member.token, "POST", `/financial/invoices/${i1}/payment?zone=client`, { wallet });
			expect({ status: byQuery.status, data: byQuery.body.data && { id: byQuery.body.data.id, status: byQuery.body.data.status } }).toEqual({
				status: 200,
				data: { id: i1, status: "PAID" },
			});
			const byHeader = await as(a.member.token, "POST", `/financial/invoices/${i2}/payment`, { wallet }, { "x-zone": "client" });
			expect({ status: byHeader.status, data: byHeader.body.data && { id: byHeader.body.data.id, status: byHeader.body.data.status } }).toEqual({
				status: 200,
				data: { id: i2, status: "PAID" },
			});
			// Without a zone the invoice is outside the member's view, as for GET.
			const i3 = await invoice();
			expect(await as(a.member.token, "POST", `/financial/invoices/${i3}/payment`, { wallet })).toMatchObject({ status: 404, body: errorBody(404) });
			// Tenant b's payer, with the zone, the grant and a wallet of its own: A's invoice does not exist for it.
			await grant(b.admin.token, { subject: b.member.subject, action: "payment", object: "financial:invoices" });
			const walletB = (await waitForValue("b's member wallet", async () => (await as(b.member.token, "GET", "/financial/wallets")).body.items?.[0]?.id)) as string;
			expect(await as(b.member.token, "POST", `/financial/invoices/${i3}/payment?zone=client`, { wallet: walletB })).toMatchObject({ status: 404, body: errorBody(404) });
		});

		test("POST /special/stats/collect answers the tenant's stats to its admin without ?zone=; never another tenant's", async () => {
			const { a, b, as } = t;
			await ok(as(a.admin.token, "POST", "/content/notes", { title: "counted" }), "note");
			const body = { period: "daily", service: "content", collection: "notes" };
			const withZone = await eventually(
				() => as(a.admin.token, "POST", "/special/stats/collect?zone=client", body),
				(r) => r.status === 200 && r.body.items?.[0]?.created >= 1,
			);
			expect(withZone.body.items[0]).toMatchObject({ service: "content", collection: "notes", period: "daily" });
			const plain = await as(a.admin.token, "POST", "/special/stats/collect", body);
			expect({ status: plain.status, body: plain.body }).toEqual({ status: 200, body: withZone.body });
			// An explicit zone is still the caller's choice.
			expect((await as(a.admin.token, "POST", "/special/stats/collect?zone=own", body)).body).toEqual({ items: [], total: 0 });
			expect((await as(b.admin.token, "POST", "/special/stats/collect", body)).body).toEqual({ items: [], total: 0 });
		});
	});

	describe("finding 15: cross-site requests authenticated by cookie", () => {
		const cookie = (token: string) => ({ cookie: `authorization=${token}` });
		const CROSS = { "sec-fetch-site": "cross-site" };
		const FOREIGN = { origin: "https://evil.example" };
		const refused = { status: 403, body: errorBody(403, CSRF) };
		const call = (method: string, path: string, headers: Record<string, string>, body?: unknown) => t.p.http(method, path, { headers, body });
		const answer = async (r: Promise<{ status: number; body: any }>) => {
			const x = await r;
			return { status: x.status, body: x.body };
		};

		test("state-changing requests from another site with the cookie: 403; the session and the documents stay", async () => {
			const { a } = t;
			const before = (await ok(t.as(a.admin.token, "GET", "/content/notes/count"), "count")).total;
			for (const site of [CROSS, FOREIGN, { origin: "null" }]) {
				expect(await answer(call("POST", "/content/notes", { ...cookie(a.admin.token), ...site }, { title: "csrf" }))).toEqual(refused);
				expect(await answer(call("GET", "/auth/logout", { ...cookie(a.admin.token), ...site }))).toEqual(refused);
			}
			expect((await ok(t.as(a.admin.token, "GET", "/content/notes/count"), "count")).total).toBe(before);
			expect((await t.as(a.admin.token, "GET", "/auth/verify")).status).toBe(200);
			// Sagas and transactions changed by GET.
			const saga = (await ok(t.as(a.admin.token, "POST", "/essential/sagas/start", { ttl: 60 }), "saga")).data.id as string;
			for (const op of ["commit", "abort"]) expect(await answer(call("GET", `/essential/sagas/${saga}/${op}`, { ...cookie(a.admin.token), ...CROSS }))).toEqual(refused);
			const wallet = (await waitForValue("the admin's wallet", async () => (await t.as(a.admin.token, "GET", "/financial/wallets")).body.items?.[0]?.id)) as string;
			const tx = (await ok(t.as(a.admin.token, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount: 5, payees: [{ wallet, amount: 5 }] }), "init")).data.id as string;
			for (const op of ["verify", "abort"]) expect(await answer(call("GET", `/financial/transactions/${tx}/${op}`, { ...cookie(a.admin.token), ...FOREIGN }))).toEqual(refused);
			expect((await ok(t.as(a.admin.token, "GET", `/financial/transactions/${tx}`), "tx")).data.state).toBe("PENDING");
			// Every other method, and the multipart upload.
			const note = (await ok(t.as(a.admin.token, "POST", "/content/notes", { title: "mine" }), "note")).data.id as string;
			expect(await answer(call("PATCH", `/content/notes/${note}`, { ...cookie(a.admin.token), ...CROSS }, { title: "x" }))).toEqual(refused);
			expect(await answer(call("DELETE", `/content/notes/${note}`, { ...cookie(a.admin.token), ...CROSS }))).toEqual(refused);
			expect(await answer(call("POST", "/auth/apts", { ...cookie(a.admin.token), ...CROSS }, { name: "x", scopes: ["whole"] }))).toEqual(refused);
			const up = await upload("", GOOD, "b", { Cookie: `authorization=${a.admin.token}`, "Sec-Fetch-Site": "cross-site" });
			expect(up).toEqual(refused);
			// The same requests from this site (or from no browser at all) work.
			const self = { origin: t.p.url };
			expect((await call("GET", `/essential/sagas/${saga}/abort`, { ...cookie(a.admin.token), ...self, "sec-fetch-site": "same-origin" })).status).toBe(200);
			expect((await call("GET", `/financial/transactions/${tx}/abort`, { ...cookie(a.admin.token) })).status).toBe(200);
			expect((await call("PATCH", `/content/notes/${note}`, { ...cookie(a.admin.token), ...self }, { title: "y" })).status).toBe(200);
		});

		test("reads from another site with the cookie, and bearer requests from anywhere, are not affected", async () => {
			const { a } = t;
			expect((await call("GET", "/content/notes", { ...cookie(a.member.token), ...CROSS, ...FOREIGN })).status).toBe(200);
			expect((await call("GET", "/auth/verify", { ...cookie(a.member.token), ...CROSS })).status).toBe(200);
			const bearer = { authorization: `Bearer ${a.member.token}`, ...CROSS, ...FOREIGN };
			expect((await call("POST", "/content/notes", bearer, { title: "by header" })).status).toBe(200);
			// A bearer header wins over a cookie: the request is not cookie-authenticated.
			expect((await call("POST", "/content/notes", { ...bearer, ...cookie(a.admin.token) }, { title: "header and cookie" })).status).toBe(200);
			// The logout of a bearer from anywhere still ends its session.
			const own = await t.login(a, a.limited.username, a.limited.password);
			expect((await call("GET", "/auth/logout", { authorization: `Bearer ${own}`, ...CROSS })).body).toEqual({ result: "OK" });
			expect((await t.as(own, "GET", "/auth/verify")).status).toBe(401);
		});
	});

	describe("finding 23: /metrics with METRICS_TOKEN", () => {
		test("401 without the metrics bearer or with another one (a user's token too); 200 with it", async () => {
			const unauthorized = { status: 401, body: errorBody(401, "metrics token is required") };
			const metrics = async (headers: Record<string, string>) => {
				const r = await t.p.http("GET", "/metrics", { headers });
				return { status: r.status, body: typeof r.body === "string" ? r.body.slice(0, 60) : r.body };
			};
			expect(await metrics({})).toEqual(unauthorized);
			expect(await metrics({ authorization: "Bearer nope" })).toEqual(unauthorized);
			expect(await metrics({ authorization: `Bearer ${t.a.admin.token}` })).toEqual(unauthorized);
			expect(await metrics({ cookie: `authorization=${METRICS_TOKEN}` })).toEqual(unauthorized);
			const r = await t.p.http("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
			expect(r.status).toBe(200);
			expect(r.text).toMatch(/^# (HELP|TYPE) /m);
			// /status stays open for probes.
			expect((await t.p.http("GET", "/status")).status).toBe(200);
		});
	});
});

describe("finding 23: the ops port's /metrics with a metrics token", () => {
	test("METRICS_TOKEN: at least 16 characters without whitespace, else the node refuses to start", () => {
		expect(metricsToken(undefined)).toBeUndefined();
		expect(metricsToken(METRICS_TOKEN)).toBe(METRICS_TOKEN);
		for (const bad of ["short", "sixteen chars ok", "x".repeat(15)]) expect(() => metricsToken(bad)).toThrow("METRICS_TOKEN must be at least 16 characters without whitespace");
	});

	test("401 without it, 200 with it; /status stays open", async () => {
		const server = http.createServer(
			opsHandler({ status: async () => ({ status: "ok", info: {} }), metrics: () => "# TYPE x counter\nx 1\n", metricsToken: METRICS_TOKEN } as any),
		);
		await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
		const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
		try {
			const plain = await fetch(`${base}/metrics`);
			expect({ status: plain.status, body: JSON.parse((await plain.text()).replace(/^#.*/s, '""')), auth: plain.headers.get("www-authenticate") }).toEqual({
				status: 401,
				body: errorBody(401, "metrics token is required"),
				auth: "Bearer",
			});
			expect((await fetch(`${base}/metrics`, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
			const good = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
			expect({ status: good.status, text: await good.text() }).toEqual({ status: 200, text: "# TYPE x counter\nx 1\n" });
			expect((await fetch(`${base}/status`)).status).toBe(200);
		} finally {
			await new Promise<void>((r) => server.close(() => r()));
		}
	});
});
