/**
 * Browsers on another origin (CORS_ORIGINS, services/api/cors.ts). A page served by this test on its own port (its
 * origin `http://127.0.0.1:<port>`, listed) calls the platform on another port: fetches with `Authorization`,
 * `Idempotency-Key` and `If-Match` (preflighted) create, read and patch a note, reading `ETag` and `Idempotent-Replayed`;
 * an `EventSource` follows the live cursor; MQTT over WebSocket on `/mqtt` delivers the change. The same page loaded as
 * `http://localhost:<port>` (another origin, not listed) cannot read any answer ("Failed to fetch"). Below the browser,
 * the wire: a preflight is answered before authentication (204 with the methods and headers; 403 naming an origin not
 * listed), answers carry the origin and `Vary: Origin`, never `*`.
 */
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import type { Browser } from "playwright-core";
import { chromiumAvailable, launchChromium } from "../helpers/chromium";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";

const suite = chromiumAvailable("cors") ? describe : describe.skip;
jest.setTimeout(120_000);

const MQTT_JS = readFileSync(path.join(__dirname, "../../node_modules/mqtt/dist/mqtt.min.js"));

/** `api(base)` is set by the test; `run(token, username)` does the three things a cross-origin app does. */
const PAGE = `<!doctype html><meta charset="utf-8"><title>cors</title><script src="/mqtt.min.js"></script><script>
window.seen = { cursor: [], mqtt: [] };
window.run = async (api, token, username, topic) => {
	const auth = { Authorization: "Bearer " + token };
	const create = await fetch(api + "/content/notes", { method: "POST", headers: { ...auth, "Content-Type": "application/json", "Idempotency-Key": "cors-1" }, body: JSON.stringify({ title: "from another origin" }) });
	const created = await create.json();
	const again = await fetch(api + "/content/notes", { method: "POST", headers: { ...auth, "Content-Type": "application/json", "Idempotency-Key": "cors-1" }, body: JSON.stringify({ title: "from another origin" }) });
	const etag = (await fetch(api + "/content/notes/" + created.data.id, { headers: auth })).headers.get("ETag");
	const patch = await fetch(api + "/content/notes/" + created.data.id, { method: "PATCH", headers: { ...auth, "Content-Type": "application/json", "If-Match": etag }, body: JSON.stringify({ title: "patched across origins" }) });
	return { status: create.status, etag, replayed: again.headers.get("Idempotent-Replayed"), patched: patch.status, id: created.data.id };
};
window.follow = (api, token, username, topic) => new Promise((resolve, reject) => {
	const source = new EventSource(api + "/content/notes/cursor?live=true&token=" + encodeURIComponent(token));
	source.addEventListener("live", () => window.seen.cursor.push({ kind: "live" }));
	source.addEventListener("change", (e) => window.seen.cursor.push({ kind: "change", data: JSON.parse(e.data) }));
	source.addEventListener("error", () => window.seen.cursor.push({ kind: "error" }));
	const client = mqtt.connect(api.replace("http", "ws") + "/mqtt", { username, password: token, reconnectPeriod: 0, protocolVersion: 4 });
	client.on("message", (t, payload) => window.seen.mqtt.push({ topic: t, data: JSON.parse(new TextDecoder().decode(payload)) }));
	client.on("connect", () => client.subscribe(topic, { qos: 1 }, (err, granted) => err ? reject(String(err)) : resolve(granted.map((g) => g.qos))));
	client.on("error", (err) => reject(String(err && err.message)));
});
window.tryFetch = (api, token) => fetch(api + "/content/notes", { headers: { Authorization: "Bearer " + token } }).then((r) => "read " + r.status, (e) => String(e && e.message));
</script>`;

suite("CORS_ORIGINS: a page on another origin", () => {
	let t: Tenancy;
	let server: Server;
	let port: number;
	let browser: Browser;
	let listed: string;

	beforeAll(async () => {
		server = createServer((req, res) => {
			if (req.url === "/") return void res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(PAGE);
			if (req.url === "/mqtt.min.js") return void res.writeHead(200, { "content-type": "text/javascript" }).end(MQTT_JS);
			res.writeHead(404).end();
		});
		await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
		port = (server.address() as AddressInfo).port;
		listed = `http://127.0.0.1:${port}`;
		t = await bootTenancy({ corsOrigins: [listed, "https://app.example.com"] });
		browser = await launchChromium();
	});

	afterAll(async () => {
		await browser?.close();
		server?.closeAllConnections();
		await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
		await t?.cleanup();
	});

	test("the wire: preflight before authentication, the origin echoed with credentials, Vary: Origin, nothing for others", async () => {
		const pre = await fetch(`${t.p.url}/content/notes`, {
			method: "OPTIONS",
			headers: { Origin: listed, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, idempotency-key" },
		});
		expect(pre.status).toBe(204);
		expect(pre.headers.get("access-control-allow-origin")).toBe(listed);
		expect(pre.headers.get("access-control-allow-credentials")).toBe("true");
		expect(pre.headers.get("access-control-allow-methods")).toBe("GET, HEAD, POST, PUT, PATCH, DELETE");
		for (const h of ["Authorization", "Idempotency-Key", "If-Match", "Last-Event-ID", "X-Zone"]) expect(pre.headers.get("access-control-allow-headers")).toContain(h);
		expect(pre.headers.get("vary")).toContain("Origin");

		const other = await fetch(`${t.p.url}/content/notes`, { method: "OPTIONS", headers: { Origin: "https://evil.example", "Access-Control-Request-Method": "GET" } });
		expect(other.status).toBe(403);
		expect(await other.json()).toEqual({
			statusCode: 403,
			message: "origin https://evil.example is not allowed: list it in CORS_ORIGINS to call the API from its pages",
			error: "Forbidden",
		});
		expect(other.headers.get("access-control-allow-origin")).toBeNull();

		const get = await fetch(`${t.p.url}/content/notes`, { headers: { Origin: listed, Authorization: `Bearer ${t.a.member.token}` } });
		expect(get.status).toBe(200);
		expect([get.headers.get("access-control-allow-origin"), get.headers.get("vary")]).toEqual([listed, "Origin"]);
		for (const h of ["ETag", "Retry-After", "Idempotent-Replayed"]) expect(get.headers.get("access-control-expose-headers")).toContain(h);
		// Unauthenticated answers carry them too: the page can read its 401.
		const denied = await fetch(`${t.p.url}/content/notes`, { headers: { Origin: listed } });
		expect([denied.status, denied.headers.get("access-control-allow-origin")]).toEqual([401, listed]);
		const foreign = await fetch(`${t.p.url}/content/notes`, { headers: { Origin: "https://evil.example", Authorization: `Bearer ${t.a.member.token}` } });
		expect([foreign.status, foreign.headers.get("access-control-allow-origin"), foreign.headers.get("access-control-allow-credentials")]).toEqual([200, null, null]);
	});

	test("Chromium on the listed origin: preflighted writes, exposed headers, a live cursor and MQTT over WebSocket", async () => {
		const { member, admin } = t.a;
		const token = await t.login(t.a, member.username, member.password);
		const page = await browser.newPage();
		const errors: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		await page.goto(listed, { waitUntil: "load" });

		const topic = `platform/share/${member.id}/content/notes/#`;
		expect(await page.evaluate(([api, tk, u, tp]) => (globalThis as any).follow(api, tk, u, tp), [t.p.url, token, member.id, topic])).toEqual([1]);
		await page.waitForFunction(() => (globalThis as any).seen.cursor.some((e: any) => e.kind === "live"), undefined, { timeout: 15_000 });

		const r = await page.evaluate(([api, tk, u]) => (globalThis as any).run(api, tk, u), [t.p.url, token, member.id]);
		expect(r).toMatchObject({ status: 200, replayed: "true", patched: 200 });
		expect(r.etag).toMatch(/^(W\/)?".+"$/);

		const note = (await ok(t.as(admin.token, "POST", "/content/notes", { title: "shared across origins", shares: [member.id] }), "note")).data;
		await page.waitForFunction(
			(id) => (globalThis as any).seen.cursor.some((e: any) => e.kind === "change" && e.data.id === id) && (globalThis as any).seen.mqtt.some((e: any) => e.data.id === id),
			note.id,
			{ timeout: 15_000 },
		);
		expect(errors).toEqual([]);
		await page.close();
	});

	test("Chromium on an origin not listed: the page cannot read the API's answers", async () => {
		const page = await browser.newPage();
		await page.goto(`http://localhost:${port}`, { waitUntil: "load" });
		expect(await page.evaluate(([api, tk]) => (globalThis as any).tryFetch(api, tk), [t.p.url, t.a.member.token])).toBe("Failed to fetch");
		await page.close();
	});
});
