/**
 * Realtime in a real browser (docs/realtime.md): headless Chromium opens a page that follows a user's notes both
 * ways at once, a live cursor (`EventSource` on `/content/notes/cursor?live=true`) and MQTT over WebSocket (the
 * browser build of mqtt.js on `/mqtt`). Another user of the tenant writes a note shared with that user: both show
 * it. Then the user's token is revoked (logout): the live cursor gets `event: error` with the 401 body and MQTT is
 * disconnected. The page and mqtt.min.js come from this test's own server, which also proxies everything else
 * (requests and WebSocket upgrades) to the platform, so the page has the gateway's origin, as behind a TLS proxy;
 * nothing comes from the internet.
 */
import { readFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import net, { type AddressInfo } from "node:net";
import path from "node:path";
import type { Browser } from "playwright-core";
import { chromiumAvailable, launchChromium } from "../helpers/chromium";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";

const suite = chromiumAvailable("realtime") ? describe : describe.skip;

jest.setTimeout(120_000);

/** mqtt.js's own browser build, from the installed package (its exports do not name the file). */
const MQTT_JS = readFileSync(path.join(__dirname, "../../node_modules/mqtt/dist/mqtt.min.js"));

/** The page: `follow(token, username, topic)` opens both ways and logs what each sees in `window.seen`. */
const PAGE = `<!doctype html><meta charset="utf-8"><title>realtime</title><script src="/mqtt.min.js"></script><script>
window.seen = { cursor: [], mqtt: [] };
window.follow = (token, username, topic) => new Promise((resolve, reject) => {
	const source = new EventSource("/content/notes/cursor?live=true&token=" + encodeURIComponent(token));
	const log = (kind) => (e) => window.seen.cursor.push({ kind, data: e.data === undefined ? undefined : JSON.parse(e.data) });
	source.addEventListener("live", log("live"));
	source.addEventListener("change", log("change"));
	source.addEventListener("error", (e) => {
		if (e.data !== undefined) log("error")(e);
		// After an error frame the stream ends: no reconnection with a token that no longer works.
		if (e.data !== undefined || source.readyState === EventSource.CLOSED) { source.close(); window.seen.cursor.push({ kind: "closed" }); }
	});
	const client = mqtt.connect("ws://" + location.host + "/mqtt", { username, password: token, reconnectPeriod: 0, protocolVersion: 4 });
	client.on("message", (t, payload) => window.seen.mqtt.push({ kind: "message", topic: t, data: JSON.parse(new TextDecoder().decode(payload)) }));
	client.on("close", () => window.seen.mqtt.push({ kind: "closed" }));
	client.on("error", (err) => window.seen.mqtt.push({ kind: "error", message: String(err && err.message) }));
	client.on("connect", () => client.subscribe(topic, { qos: 1 }, (err, granted) => err ? reject(String(err)) : resolve(granted.map((g) => g.qos))));
});
</script>`;

/** Serves the page and mqtt.min.js; proxies every other request, and WebSocket upgrades, to `target`. */
function pageServer(target: URL): Server {
	const server = createServer((req, res) => {
		if (req.url === "/") return void res.writeHead(200, { "content-type": "text/html; charset=utf-8" }).end(PAGE);
		if (req.url === "/mqtt.min.js") return void res.writeHead(200, { "content-type": "text/javascript" }).end(MQTT_JS);
		const out = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
			res.writeHead(up.statusCode!, up.headers);
			up.pipe(res);
		});
		out.on("error", () => res.destroy());
		req.pipe(out);
	});
	server.on("upgrade", (req, socket, head) => {
		const up = net.connect(Number(target.port), target.hostname, () => {
			const lines = [`${req.method} ${req.url} HTTP/1.1`];
			for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
			up.write(`${lines.join("\r\n")}\r\n\r\n`);
			up.write(head);
			up.pipe(socket).pipe(up);
		});
		up.on("error", () => socket.destroy());
		socket.on("error", () => up.destroy());
		socket.on("close", () => up.destroy());
	});
	return server;
}

suite("realtime in Chromium", () => {
	let t: Tenancy;
	let server: Server;
	let base: string;
	let browser: Browser;

	beforeAll(async () => {
		t = await bootTenancy();
		server = pageServer(new URL(t.p.url));
		await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
		base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
		browser = await launchChromium();
	});

	afterAll(async () => {
		await browser?.close();
		server?.closeAllConnections();
		await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
		await t?.cleanup();
	});

	it("a live cursor and MQTT over WebSocket show another user's change, and a revoked token ends both", async () => {
		const { member, admin } = t.a;
		const token = await t.login(t.a, member.username, member.password);
		const page = await browser.newPage();
		const errors: string[] = [];
		const external: string[] = [];
		page.on("pageerror", (e) => errors.push(String(e)));
		page.on("request", (r) => {
			// mqtt.js runs its keep-alive timer in a worker made from a blob of the page's own origin.
			if (![base, `blob:${base}/`].some((own) => r.url().startsWith(own))) external.push(r.url());
		});
		await page.goto(base, { waitUntil: "load" });

		const topic = `platform/share/${member.id}/content/notes/#`;
		expect(await page.evaluate(([tk, u, tp]) => (globalThis as any).follow(tk, u, tp), [token, member.id, topic])).toEqual([1]);
		await page.waitForFunction(() => (globalThis as any).seen.cursor.some((e: any) => e.kind === "live"), undefined, { timeout: 15_000 });

		// Another user of the tenant writes a note shared with the member.
		const note = (await ok(t.as(admin.token, "POST", "/content/notes", { title: "for the browser", shares: [member.id] }), "note")).data;
		await page.waitForFunction(
			(id) =>
				(globalThis as any).seen.cursor.some((e: any) => e.kind === "change" && e.data.id === id) &&
				(globalThis as any).seen.mqtt.some((e: any) => e.kind === "message" && e.data.id === id),
			note.id,
			{ timeout: 15_000 },
		);
		const seen = await page.evaluate(() => (globalThis as any).seen);
		expect(seen.cursor.find((e: any) => e.kind === "change").data).toMatchObject({ op: "enter", id: note.id, data: { id: note.id, title: "for the browser" } });
		expect(seen.mqtt.find((e: any) => e.kind === "message")).toMatchObject({
			topic: `platform/share/${member.id}/content/notes/${note.id}`,
			data: { id: note.id, op: "c", after: { title: "for the browser", shares: [member.id] } },
		});

		// The token is revoked: the live cursor answers its 401 frame and ends, MQTT is disconnected.
		expect((await t.p.http("GET", "/auth/logout", { token })).status).toBe(200);
		await page.waitForFunction(
			() => (globalThis as any).seen.cursor.some((e: any) => e.kind === "closed") && (globalThis as any).seen.mqtt.some((e: any) => e.kind === "closed"),
			undefined,
			{ timeout: 10_000 },
		);
		const end = await page.evaluate(() => (globalThis as any).seen);
		expect(end.cursor.find((e: any) => e.kind === "error")?.data).toMatchObject({ statusCode: 401, error: "Unauthorized" });
		expect(errors).toEqual([]);
		expect(external).toEqual([]);
		await page.close();
	});
});
