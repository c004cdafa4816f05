/**
 * Issue 11, what test/integration/touch-delivery.test.ts leaves out:
 * - email: the received MIME message is parsed (headers, the html and the text part, quoted-printable / base64 and
 *   encoded words decoded here); the record is SENT with the received Message-ID and the accepted recipient. The SMTP
 *   server stopped: an email is retried (attempts grow, QUEUED with the reason) then FAILED with the reason once its
 *   attempts are spent; another, sent while it is down, is delivered exactly once when the server is back on the same
 *   port. (Attachments from special/files: test/integration/files-attachments.test.ts.)
 * - Web Push and SMS over HTTPS to a local service with a self-signed certificate, trusted through TLS_CA_FILE only:
 *   without it the same request fails on certificate verification (never turned off).
 */
import type { Job } from "../../lib/contracts";
import { execFileSync } from "child_process";
import { createECDH, createHmac, createDecipheriv, randomBytes } from "crypto";
import { mkdtempSync, readFileSync, rmSync } from "fs";
import https from "https";
import http from "http";
import os from "os";
import path from "path";
import jwt from "jsonwebtoken";
import { SMTPServer } from "smtp-server";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { Delivery } from "../../workers/publisher/delivery";

jest.setTimeout(90_000);

interface Mail {
	id: string;
	raw: Buffer;
}

let p: TestPlatform;
let smtp: SMTPServer | undefined;
let smtpPort = 0;
const mails: Mail[] = [];
let token = "";
let tlsDir = "";
let pushServer: https.Server;
let pushBase = "";
const pushHits: Array<{ url: string; headers: http.IncomingHttpHeaders; body: Buffer }> = [];

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 20_000): Promise<T> {
	const end = Date.now() + ms;
	for (;;) {
		const v = await fn();
		if (v) return v as T;
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
		await sleep(100);
	}
}

/** An SMTP server on `port` (0 = any); stopped with close() (its idle pooled connections are cut after 100 ms). */
function startSmtp(port: number): Promise<number> {
	smtp = new SMTPServer({
		disabledCommands: ["STARTTLS", "AUTH"],
		closeTimeout: 100,
		onData(stream, _session, cb) {
			const chunks: Buffer[] = [];
			stream.on("data", (c: Buffer) => chunks.push(c));
			stream.on("end", () => {
				const raw = Buffer.concat(chunks);
				mails.push({ id: /X-Platform-Email: (\w+)/i.exec(raw.toString("latin1"))?.[1] ?? "", raw });
				cb();
			});
		},
		logger: false,
	});
	smtp.on("error", () => undefined); // a pooled connection cut by close() or the platform stopping
	return new Promise((resolve, reject) => {
		smtp!.server.once("error", reject);
		smtp!.listen(port, "127.0.0.1", () => resolve((smtp!.server.address() as any).port));
	});
}
const stopSmtp = () => new Promise<void>((r) => (smtp ? smtp.close(() => r()) : r()));

// ---- a minimal MIME reader (RFC 2045/2046/2047): enough for what nodemailer writes ----
interface Part {
	headers: Record<string, string>;
	body: Buffer;
	parts: Part[];
}
function qp(s: string): Buffer {
	const bytes: number[] = [];
	const t = s.replace(/=\r?\n/g, "");
	for (let i = 0; i < t.length; i++) {
		if (t[i] === "=" && /^[0-9A-Fa-f]{2}$/.test(t.slice(i + 1, i + 3))) {
			bytes.push(parseInt(t.slice(i + 1, i + 3), 16));
			i += 2;
		} else bytes.push(t.charCodeAt(i));
	}
	return Buffer.from(bytes);
}
function words(v: string): string {
	return v.replace(/=\?utf-8\?([BQ])\?([^?]*)\?=\s*/gi, (_m, enc: string, text: string) =>
		(enc.toUpperCase() === "B" ? Buffer.from(text, "base64") : qp(text.replace(/_/g, " "))).toString("utf8"),
	);
}
function param(value: string, name: string): string | undefined {
	return new RegExp(`${name}="?([^";]+)"?`, "i").exec(value)?.[1];
}
function parseMime(raw: string): Part {
	const at = raw.indexOf("\r\n\r\n");
	const head = raw.slice(0, at).replace(/\r\n[ \t]+/g, " ");
	const text = raw.slice(at + 4);
	const headers: Record<string, string> = {};
	for (const line of head.split("\r\n")) {
		const c = line.indexOf(":");
		if (c > 0) headers[line.slice(0, c).trim().toLowerCase()] = words(line.slice(c + 1).trim());
	}
	const type = headers["content-type"] ?? "text/plain";
	const boundary = /^multipart\//i.test(type) ? param(type, "boundary") : undefined;
	if (boundary) {
		const segments = text.split(`--${boundary}`);
		// segments[0] is the preamble; the one after the closing delimiter starts with "--".
		const parts = segments
			.slice(1)
			.filter((s) => !s.startsWith("--"))
			.map((s) => parseMime(s.replace(/^\r\n/, "").replace(/\r\n$/, "")));
		return { headers, body: Buffer.alloc(0), parts };
	}
	const cte = (headers["content-transfer-encoding"] ?? "7bit").toLowerCase();
	const body = cte === "quoted-printable" ? qp(text) : cte === "base64" ? Buffer.from(text.replace(/\s+/g, ""), "base64") : Buffer.from(text, "latin1");
	return { headers, body, parts: [] };
}
function leaves(p: Part): Part[] {
	return p.parts.length ? p.parts.flatMap(leaves) : [p];
}

const get = (pth: string) => p.http("GET", pth, { token });
async function sendEmail(body: Record<string, unknown>): Promise<string> {
	const r = await p.http("POST", "/touch/emails/send", { token, body });
	expect(r.status).toBe(200);
	expect(r.body.data.state).toBe("QUEUED");
	return r.body.data.id;
}
const emailDoc = async (id: string) => (await get(`/touch/emails/${id}`)).body.data;

beforeAll(async () => {
	smtpPort = await startSmtp(0);
	tlsDir = mkdtempSync(path.join(os.tmpdir(), "touch-tls-"));
	// A self-signed certificate for 127.0.0.1 (node:crypto cannot write X.509 certificates): openssl on the machine.
	execFileSync(
		"openssl",
		[
			"req",
			"-x509",
			"-newkey",
			"ec",
			"-pkeyopt",
			"ec_paramgen_curve:prime256v1",
			"-nodes",
			"-subj",
			"/CN=127.0.0.1",
			"-addext",
			"subjectAltName=IP:127.0.0.1",
			"-days",
			"1",
			"-keyout",
			path.join(tlsDir, "key.pem"),
			"-out",
			path.join(tlsDir, "ca.pem"),
		],
		{ stdio: "ignore" },
	);
	pushServer = https.createServer({ key: readFileSync(path.join(tlsDir, "key.pem")), cert: readFileSync(path.join(tlsDir, "ca.pem")) }, (req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			pushHits.push({ url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
			if (req.url!.startsWith("/2010-04-01/")) return res.writeHead(201, { "content-type": "application/json" }).end(JSON.stringify({ sid: "SM1", status: "queued" }));
			res.writeHead(201).end();
		});
	});
	await new Promise<void>((r) => pushServer.listen(0, "127.0.0.1", () => r()));
	pushBase = `https://127.0.0.1:${(pushServer.address() as any).port}`;
	p = await bootPlatform({
		webhookAllowPrivate: true,
		smtpUrl: `smtp://127.0.0.1:${smtpPort}`,
		touchRetrySchedule: [0, 0.2, 0.2],
		tlsCaFile: path.join(tlsDir, "ca.pem"),
		smsProviders: { twilio: { url: pushBase, key: "ACtls:tok", from: "+15005550006" } },
	});
	token = await p.rootToken();
});

afterAll(async () => {
	await p?.cleanup();
	await stopSmtp();
	pushServer?.close();
	if (tlsDir) rmSync(tlsDir, { recursive: true, force: true });
});

describe("email over a real SMTP server", () => {
	test("the received message parses: To/From/Subject/Message-ID, the html and the text part; the record is SENT with that Message-ID and accepted", async () => {
		const id = await sendEmail({
			to: ["ana@example.com"],
			from: "Platform <noreply@example.com>",
			subject: "Grüße ✓ 1",
			text: "Hallo Ana, Grüße — line one\nline two ✓",
			html: "<p>Hallo <b>Ana</b>, Grüße — ✓</p>",
		});
		const mail = await until("the message", () => mails.find((m) => m.id === id));
		const msg = parseMime(mail.raw.toString("latin1"));
		expect(msg.headers.to).toBe("ana@example.com");
		expect(msg.headers.from).toBe("Platform <noreply@example.com>");
		expect(msg.headers.subject).toBe("Grüße ✓ 1");
		expect(msg.headers["x-platform-email"]).toBe(id);
		expect(msg.headers["content-type"]).toMatch(/^multipart\/alternative;/);
		const parts = leaves(msg);
		const text = parts.find((x) => /^text\/plain/.test(x.headers["content-type"]));
		const html = parts.find((x) => /^text\/html/.test(x.headers["content-type"]));
		expect(text?.body.toString("utf8").replace(/\r\n/g, "\n")).toBe("Hallo Ana, Grüße — line one\nline two ✓");
		expect(html?.body.toString("utf8")).toBe("<p>Hallo <b>Ana</b>, Grüße — ✓</p>");
		const doc = await until("SENT", async () => ((await emailDoc(id)).state === "SENT" ? emailDoc(id) : undefined));
		expect(doc.smtp.message_id).toBe(msg.headers["message-id"]);
		expect(doc.smtp.message_id).toBe(`<${id}@${p.cfg.rootDomain}>`);
		expect(doc.smtp.accepted).toEqual(["ana@example.com"]);
		expect(doc.smtp.rejected).toEqual([]);
		expect(doc.attempts).toBe(1);
	});

	test("SMTP down: retried, then FAILED with the reason; one sent while down is delivered exactly once when it is back", async () => {
		await stopSmtp();
		// Short schedule (3 attempts, 0.2 s apart): spent while the server is down.
		const lost = await sendEmail({ to: ["bo@example.com"], from: "noreply@example.com", subject: "lost", text: "x" });
		const failed = await until("FAILED", async () => {
			const d = await emailDoc(lost);
			return d.state === "FAILED" ? d : undefined;
		});
		expect(failed.attempts).toBe(3);
		expect(failed.reason).toMatch(/ECONNREFUSED/);
		expect(failed.smtp.code).toBe("ESOCKET");
		expect(failed.sent_at).toBeUndefined();

		// A longer schedule for the next one (the touch service reads the bound configuration at each settle).
		p.cfg.touchRetrySchedule = [0, ...Array(40).fill(0.5)];
		const later = await sendEmail({ to: ["cy@example.com"], from: "noreply@example.com", subject: "later", text: "y" });
		const retried = await until("a retry queued", async () => {
			const d = await emailDoc(later);
			return d.state === "QUEUED" && d.attempts >= 2 ? d : undefined;
		});
		expect(retried.reason).toMatch(/ECONNREFUSED/);
		expect(Date.parse(retried.next_at)).toBeGreaterThan(Date.parse(retried.updated_at) - 1);
		expect(mails.find((m) => m.id === later)).toBeUndefined();

		expect(await startSmtp(smtpPort)).toBe(smtpPort);
		await until("delivered after the restart", () => mails.find((m) => m.id === later));
		const sent = await until("SENT", async () => {
			const d = await emailDoc(later);
			return d.state === "SENT" ? d : undefined;
		});
		expect(sent.attempts).toBeGreaterThanOrEqual(3);
		expect(sent.reason).toBeNull();
		expect(sent.smtp.accepted).toEqual(["cy@example.com"]);
		await sleep(2000);
		expect(mails.filter((m) => m.id === later)).toHaveLength(1);
		expect(mails.filter((m) => m.id === lost)).toHaveLength(0);
		expect((await emailDoc(lost)).state).toBe("FAILED");
	});
});

/** RFC 8291 (aes128gcm) decryption with the user agent's private key and auth secret. */
function decryptPush(body: Buffer, ua: ReturnType<typeof createECDH>, auth: Buffer): string {
	const salt = body.subarray(0, 16);
	const idlen = body[20];
	const asPublic = body.subarray(21, 21 + idlen);
	const record = body.subarray(21 + idlen);
	const hmac = (key: Buffer, data: Buffer) => createHmac("sha256", key).update(data).digest();
	const prk = hmac(salt, hmac(hmac(auth, ua.computeSecret(asPublic)), Buffer.concat([Buffer.from("WebPush: info\0"), ua.getPublicKey(), asPublic, Buffer.from([1])])));
	const cek = hmac(prk, Buffer.from("Content-Encoding: aes128gcm\0\x01", "binary")).subarray(0, 16);
	const nonce = hmac(prk, Buffer.from("Content-Encoding: nonce\0\x01", "binary")).subarray(0, 12);
	const d = createDecipheriv("aes-128-gcm", cek, nonce);
	d.setAuthTag(record.subarray(record.length - 16));
	const plain = Buffer.concat([d.update(record.subarray(0, record.length - 16)), d.final()]);
	let end = plain.length - 1;
	while (end > 0 && plain[end] === 0) end--;
	return plain.subarray(0, end).toString("utf8");
}

describe("HTTPS push service and SMS provider trusted through TLS_CA_FILE", () => {
	const ua = createECDH("prime256v1");
	ua.generateKeys();
	const auth = randomBytes(16);
	const keys = { p256dh: ua.getPublicKey().toString("base64url"), auth: auth.toString("base64url") };

	test("a push to an https endpoint with a self-signed certificate in TLS_CA_FILE is delivered and decrypts", async () => {
		const session = (jwt.decode(token) as any).session;
		const s = await p.http("POST", "/touch/pushes", { token, body: { session, keys, endpoint: `${pushBase}/push/tls/1`, expiration: 1_900_000_000 } });
		expect(s.status).toBe(200);
		const r = await p.http("POST", "/touch/pushes/send", { token, body: { push: s.body.data.id, title: "secure", body: "over https" } });
		expect(r.status).toBe(200);
		const hit = await until("the push", () => pushHits.find((h) => h.url === "/push/tls/1"));
		expect(JSON.parse(decryptPush(hit.body, ua, auth))).toEqual({ title: "secure", body: "over https" });
		expect(String(hit.headers.authorization)).toMatch(/^vapid t=/);
		const h = await until("SENT", async () => {
			const d = (await get(`/touch/push-histories/${r.body.data.items[0].id}`)).body.data;
			return d.status === "SENT" ? d : undefined;
		});
		expect(h.res).toEqual({ status: 201, body: "" });
	});

	test("an SMS to an https provider URL with that certificate is SENT", async () => {
		const r = await p.http("POST", "/touch/smss/send", { token, body: { provider: "twilio", receptors: ["+14155550100"], message: "tls" } });
		expect(r.status).toBe(200);
		const d = await until("SENT", async () => {
			const x = (await get(`/touch/smss/${r.body.data.id}`)).body.data;
			return x.state === "SENT" ? x : undefined;
		});
		expect(d.res.answers[0].status).toBe(201);
		expect(pushHits.filter((x) => x.url === "/2010-04-01/Accounts/ACtls/Messages.json")).toHaveLength(1);
	});

	/** One attempt of a publisher with the given settings, against a fake touch service: the outcome it settles. */
	async function attemptWith(cfg: typeof p.cfg, job: Job): Promise<any> {
		const settled: any[] = [];
		const fake = {
			nodeID: "fake",
			isMetricsEnabled: () => false,
			metrics: {},
			registry: { hasService: () => true },
			call: async (action: string, params: any) => {
				if (action.endsWith("claim")) return job;
				settled.push(params.outcome);
				return { settled: true, state: "QUEUED" };
			},
		};
		await new Delivery(fake, cfg, p.broker.logger as any).attempt(job.collection, job.id);
		return settled[0];
	}

	test("without TLS_CA_FILE the same endpoint fails certificate verification (not disabled); an unreadable file stops the publisher", async () => {
		const push: Job = {
			collection: "push-histories",
			id: "b".repeat(24),
			attempt: 1,
			created_at: new Date().toISOString(),
			doc: { message: { title: "t", body: "b" } },
			subscription: { endpoint: `${pushBase}/push/untrusted`, keys },
		};
		const before = pushHits.length;
		const untrusted = await attemptWith({ ...p.cfg, tlsCaFile: undefined }, push);
		expect(untrusted).toMatchObject({ ok: false, permanent: false, reason: "DEPTH_ZERO_SELF_SIGNED_CERT" });
		const sms: Job = {
			collection: "smss",
			id: "c".repeat(24),
			attempt: 1,
			created_at: new Date().toISOString(),
			doc: { provider: "twilio", receptors: ["+14155550100"], message: "m" },
			sms: { url: pushBase, key: "ACx:y", from: "+15005550006" },
		};
		expect(await attemptWith({ ...p.cfg, tlsCaFile: undefined }, sms)).toMatchObject({ ok: false, reason: "DEPTH_ZERO_SELF_SIGNED_CERT" });
		expect(pushHits.length).toBe(before);
		// The same with the CA file: delivered.
		expect(await attemptWith(p.cfg, push)).toMatchObject({ ok: true, info: { status: 201 } });
		expect(() => new Delivery(p.broker as any, { ...p.cfg, tlsCaFile: path.join(tlsDir, "nope.pem") }, p.broker.logger as any)).toThrow(
			`TLS_CA_FILE ${path.join(tlsDir, "nope.pem")} cannot be read: ENOENT`,
		);
	});
});
