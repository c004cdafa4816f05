/**
 * A CQRS config's webhook credentials (`secret`, `authorization`) are encrypted at rest, never returned after they
 * were sent, never in change events, and still used by the dispatcher to authorize and sign deliveries.
 */
import http from "http";
import type { AddressInfo } from "net";
import { bootPlatform, dataDirHoldingOutbox, type TestPlatform } from "../helpers/platform";
import { storedText } from "../helpers/stored";
import { sharedOutbox } from "../../events/outbox";
import { verify } from "../../workers/dispatcher/signature";

const SECRET = "whsec_" + Buffer.from("a-very-secret-signing-key-123456").toString("base64");
const AUTH = "Basic c2hhcmVkLXNlY3JldA==";

let p: TestPlatform;
let token: string;
let server: http.Server;
const received: Array<{ headers: http.IncomingHttpHeaders; body: string }> = [];

beforeAll(async () => {
	// Every change event stays in the outbox (read below), whichever store.
	p = await bootPlatform({ dataDir: dataDirHoldingOutbox(), webhookAllowPrivate: true, webhookRetrySchedule: [0, 0.2] });
	token = await p.rootToken();
	server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			received.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
			res.writeHead(204).end();
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
});

afterAll(async () => {
	server.close();
	await p.cleanup();
});

test("credentials are sealed at rest, hidden from every response and event, and still sign deliveries", async () => {
	const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
	const created = await p.http("POST", "/context/configs", { token, body: { key: "CQRS", eid: p.root.client_id, value: { webhook: url, secret: SECRET, authorization: AUTH } } });
	expect(created.status).toBe(200);
	expect(created.body.data.value).toEqual({ webhook: url });
	const id = created.body.data.id;
	expect((await p.http("GET", `/context/configs/${id}`, { token })).body.data.value).toEqual({ webhook: url });
	const listed = await p.http("GET", "/context/configs", { token });
	expect(listed.text).not.toContain(SECRET);
	expect(listed.text).not.toContain(AUTH);

	// Re-enabling by patching the value without credentials keeps them.
	const patched = await p.http("PATCH", `/context/configs/${id}`, { token, body: { value: { webhook: url } } });
	expect(patched.body.data.value).toEqual({ webhook: url });

	const note = await p.http("POST", "/content/notes", { token, body: { title: "signed" } });
	const deadline = Date.now() + 15_000;
	while (!received.some((r) => r.body.includes(note.body.data.id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
	const hit = received.find((r) => r.body.includes(note.body.data.id))!;
	expect(hit.headers.authorization).toBe(AUTH);
	const h = hit.headers as Record<string, string>;
	expect(verify(SECRET, h["webhook-id"], Number(h["webhook-timestamp"]), hit.body, h["webhook-signature"])).toBe(true);

	// Nothing in clear at rest (the PostgreSQL rows) nor in the outbox.
	const file = await storedText(p, "context/configs");
	expect(file).not.toContain(SECRET);
	expect(file).not.toContain(AUTH);
	expect(file).toContain('"secret":"aes:');
	const events = JSON.stringify(await sharedOutbox(p.cfg).readFrom(0, 10_000));
	expect(events).toContain(note.body.data.id);
	expect(events).not.toContain(SECRET);
	expect(events).not.toContain(AUTH);
	for (const r of received) {
		expect(r.body).not.toContain(SECRET);
		expect(r.body).not.toContain("aes:");
	}
});
