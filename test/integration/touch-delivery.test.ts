/**
 * Communications delivered for real (issue 11): a real SMTP server (smtp-server) receives the emails; a local push
 * service receives RFC 8291 aes128gcm payloads that the test decrypts with the subscription's private key, and a VAPID
 * JWT (RFC 8292) it verifies; local HTTP servers stand for kavenegar and twilio and receive their exact wire shapes.
 * Retries with backoff then SENT once, scheduled dates, two publisher instances, notices over MQTT, and a leak scan.
 */
import type { Job } from "../../lib/contracts";
import http from "http";
import { createECDH, createHmac, createDecipheriv, createPublicKey, randomBytes, verify } from "crypto";
import { readdirSync, readFileSync, statSync } from "fs";
import path from "path";
import jwt from "jsonwebtoken";
import mqtt from "mqtt";
import { SMTPServer } from "smtp-server";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { LeakWatch } from "../helpers/auth";
import { Delivery } from "../../workers/publisher/delivery";
import { sharedStream } from "../../events/stream";

jest.setTimeout(90_000);

const SMTP_PASS = "Smtp-Pass-7f3e9a1c";
const KAV_KEY = "kavKey5e1d0c8b7a";
const TW_SID = "AC9d8c7b6a5f4e3d2c";
const TW_TOKEN = "twTok4b3a2918f7e6";

interface Mail {
	id: string;
	raw: string;
	user?: string;
}
interface Hit {
	method: string;
	url: string;
	headers: http.IncomingHttpHeaders;
	body: Buffer;
}

let p: TestPlatform;
let smtp: SMTPServer;
const mails: Mail[] = [];
const pushHits: Hit[] = [];
const smsHits: Hit[] = [];
let pushServer: http.Server;
let smsServer: http.Server;
let pushBase = "";
let smsBase = "";
let token = "";
let leak: LeakWatch;
let flaky = 0;
let kavFailures = 0;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15_000): Promise<T> {
	const end = Date.now() + ms;
	for (;;) {
		const v = await fn();
		if (v) return v as T;
		if (Date.now() > end) throw new Error("timed out waiting");
		await sleep(100);
	}
}

function listen(handler: http.RequestListener): Promise<[http.Server, string]> {
	const s = http.createServer(handler);
	return new Promise((resolve) => s.listen(0, "127.0.0.1", () => resolve([s, `http://127.0.0.1:${(s.address() as any).port}`])));
}

function collect(req: http.IncomingMessage): Promise<Buffer> {
	return new Promise((resolve) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => resolve(Buffer.concat(chunks)));
	});
}

const get = (pth: string) => leak.http("GET", pth, { token });

beforeAll(async () => {
	smtp = new SMTPServer({
		disabledCommands: ["STARTTLS"],
		allowInsecureAuth: true,
		onAuth(auth, _s, cb) {
			if (auth.username === "mailer" && auth.password === SMTP_PASS) cb(null, { user: "mailer" });
			else cb(new Error("bad credentials"));
		},
		onData(stream, session, cb) {
			let raw = "";
			stream.on("data", (c) => (raw += c.toString()));
			stream.on("end", () => {
				const id = /X-Platform-Email: (\w+)/i.exec(raw)?.[1] ?? "";
				mails.push({ id, raw, user: session.user as string });
				cb();
			});
		},
		logger: false,
	});
	const smtpPort = await new Promise<number>((resolve) => smtp.listen(0, "127.0.0.1", () => resolve((smtp.server.address() as any).port)));

	[pushServer, pushBase] = await listen(async (req, res) => {
		const body = await collect(req);
		pushHits.push({ method: req.method!, url: req.url!, headers: req.headers, body });
		if (req.url!.startsWith("/push/gone")) return res.writeHead(410).end("gone");
		if (req.url!.startsWith("/push/flaky") && flaky++ < 2) return res.writeHead(500).end("busy");
		res.writeHead(201).end();
	});
	[smsServer, smsBase] = await listen(async (req, res) => {
		const body = await collect(req);
		smsHits.push({ method: req.method!, url: req.url!, headers: req.headers, body });
		if (req.url!.startsWith("/v1/")) {
			if (kavFailures-- > 0) return res.writeHead(503).end("try later");
			return res
				.writeHead(200, { "content-type": "application/json" })
				.end(JSON.stringify({ return: { status: 200, message: "تایید شد" }, entries: [{ messageid: 8792343, status: 1 }] }));
		}
		const form = new URLSearchParams(body.toString());
		res.writeHead(201, { "content-type": "application/json" }).end(
			JSON.stringify({
				sid: `SM${randomBytes(8).toString("hex")}`,
				account_sid: TW_SID,
				to: form.get("To"),
				status: "queued",
				uri: `/2010-04-01/Accounts/${TW_SID}/Messages/SM1.json`,
			}),
		);
	});

	p = await bootPlatform({
		webhookAllowPrivate: true,
		smtpUrl: `smtp://mailer:${SMTP_PASS}@127.0.0.1:${smtpPort}`,
		touchRetrySchedule: [0, 0.3, 0.3, 0.3],
		smsProviders: { twilio: { url: smsBase, key: `${TW_SID}:${TW_TOKEN}`, from: "+15005550006" } },
	});
	leak = new LeakWatch(p);
	for (const [v, k] of [
		[SMTP_PASS, "smtp password"],
		[KAV_KEY, "kavenegar key"],
		[TW_TOKEN, "twilio token"],
		[TW_SID, "twilio sid"],
	] as const)
		leak.secret(v, k, true);
	token = await p.rootToken();
});

afterAll(async () => {
	await p?.cleanup();
	await new Promise<void>((r) => smtp.close(() => r()));
	pushServer?.close();
	smsServer?.close();
});

/** The send routes, over HTTP through the gateway and the authority layer; a non-200 answer rejects with its error body. */
async function send(pth: string, body: unknown): Promise<any> {
	const r = await leak.http("POST", pth, { token, body });
	if (r.status !== 200) throw { code: r.status, message: r.body?.message, body: r.body };
	expect(r.headers.get("content-type")).toMatch(/^application\/json/);
	return r.body;
}
const sendEmail = (body: unknown) => send("/touch/emails/send", body);
const sendSms = (body: unknown) => send("/touch/smss/send", body);
const sendSmsTemplate = (body: unknown) => send("/touch/smss/send/template", body);
const sendPush = (body: unknown) => send("/touch/pushes/send", body);
async function vapidPublicKey(): Promise<string> {
	const r = await get("/touch/pushes/vapid");
	expect(r.status).toBe(200);
	return r.body.data.public_key;
}

const email = (n: number, extra: Record<string, unknown> = {}) => ({
	to: [`user${n}@example.com`],
	from: "Platform <noreply@example.com>",
	subject: `Hello ${n}`,
	text: `Body ${n}`,
	...extra,
});

describe("email", () => {
	test("sendEmail queues the record and the SMTP server receives it; the record becomes SENT with smtp metadata", async () => {
		const r = await sendEmail(email(1));
		expect(r.data.state).toBe("QUEUED");
		expect(r.data.provider).toBe("nodemailer");
		const id = r.data.id;
		const mail = await until(() => mails.find((m) => m.id === id));
		expect(mail.raw).toContain("Subject: Hello 1");
		expect(mail.raw).toContain("Body 1");
		expect(mail.user).toBe("mailer");
		const doc = await until(async () => ((await get(`/touch/emails/${id}`)).body.data.state === "SENT" ? (await get(`/touch/emails/${id}`)).body.data : undefined));
		expect(doc.smtp.accepted).toEqual(["user1@example.com"]);
		expect(doc.smtp.message_id).toBe(`<${id}@${p.cfg.rootDomain}>`);
		expect(typeof doc.sent_at).toBe("string");
		expect(doc.attempts).toBe(1);
		expect(doc.lease).toBeUndefined();
	});

	test("a record created through POST /touch/emails is delivered from the change stream too", async () => {
		const r = await leak.http("POST", "/touch/emails", { token, body: { provider: "nodemailer", ...email(2) } });
		expect(r.status).toBe(200);
		expect(r.body.data.state).toBe("QUEUED");
		await until(() => mails.find((m) => m.id === r.body.data.id));
	});

	test("delivery fields are set by the platform only: a body naming one answers 400", async () => {
		const r = await leak.http("POST", "/touch/emails", { token, body: { provider: "nodemailer", ...email(3), state: "SENT" } });
		expect(r.status).toBe(400);
		expect(r.body).toEqual({ statusCode: 400, message: "state is set by the platform", error: "Bad Request" });
		await expect(sendEmail({ ...email(3), smtp: { accepted: [] } })).rejects.toMatchObject({ code: 400, message: "smtp is set by the platform" });
		await expect(sendEmail({ subject: "x" })).rejects.toMatchObject({ code: 400, message: "to is required" });
	});

	test("a future date schedules the email: nothing is sent before it", async () => {
		const at = new Date(Date.now() + 2500).toISOString();
		const r = await sendEmail(email(4, { date: at }));
		expect(r.data.next_at).toBe(at);
		await sleep(1500);
		expect(mails.find((m) => m.id === r.data.id)).toBeUndefined();
		expect((await get(`/touch/emails/${r.data.id}`)).body.data.state).toBe("QUEUED");
		await until(() => mails.find((m) => m.id === r.data.id));
		// The record becomes SENT after the SMTP server accepted the mail: wait for that write, as the first test does.
		const doc = await until(async () => {
			const d = (await get(`/touch/emails/${r.data.id}`)).body.data;
			return d.state === "SENT" ? d : undefined;
		});
		expect(Date.parse(doc.sent_at)).toBeGreaterThanOrEqual(Date.parse(at));
	});

	test("two publisher instances share the work and never send one record twice", async () => {
		const second = new Delivery(p.broker as any, p.cfg, p.broker.logger as any);
		await second.start(sharedStream(p.cfg));
		try {
			const ids: string[] = [];
			for (let i = 0; i < 12; i++) ids.push((await sendEmail(email(100 + i))).data.id);
			await until(async () => {
				const r = await get(
					`/touch/emails?query=${encodeURIComponent(JSON.stringify({ id: { $in: ids }, state: "SENT" }))}&pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`,
				);
				return r.body.total === 12;
			});
			await sleep(1500);
			for (const id of ids) expect(mails.filter((m) => m.id === id)).toHaveLength(1);
		} finally {
			await second.stop();
		}
	});

	test("without SMTP_URL an email is FAILED with reason `no transport`, at once (no retry)", async () => {
		const settled: any[] = [];
		const job: Job = { collection: "emails", id: "a".repeat(24), attempt: 1, created_at: new Date().toISOString(), doc: email(9) };
		const fake = {
			nodeID: "fake",
			isMetricsEnabled: () => false,
			metrics: {},
			call: async (action: string, params: any) => {
				if (action.endsWith("claim")) return job;
				settled.push(params);
				return { settled: true, state: "FAILED" };
			},
		};
		const d = new Delivery(fake, { ...p.cfg, smtpUrl: undefined }, p.broker.logger as any);
		await d.attempt("emails", job.id);
		expect(settled[0].outcome).toEqual({ ok: false, permanent: true, reason: "no transport" });
	});
});

/** RFC 8291 (aes128gcm) decryption with the user agent's private key and auth secret. */
function decryptPush(body: Buffer, ua: ReturnType<typeof createECDH>, auth: Buffer): string {
	const salt = body.subarray(0, 16);
	const idlen = body[20];
	const asPublic = body.subarray(21, 21 + idlen);
	const record = body.subarray(21 + idlen);
	const hmac = (key: Buffer, data: Buffer) => createHmac("sha256", key).update(data).digest();
	const secret = ua.computeSecret(asPublic);
	const prkKey = hmac(auth, secret);
	const ikm = hmac(prkKey, Buffer.concat([Buffer.from("WebPush: info\0"), ua.getPublicKey(), asPublic, Buffer.from([1])]));
	const prk = hmac(salt, ikm);
	const cek = hmac(prk, Buffer.from("Content-Encoding: aes128gcm\0\x01", "binary")).subarray(0, 16);
	const nonce = hmac(prk, Buffer.from("Content-Encoding: nonce\0\x01", "binary")).subarray(0, 12);
	const d = createDecipheriv("aes-128-gcm", cek, nonce);
	d.setAuthTag(record.subarray(record.length - 16));
	const plain = Buffer.concat([d.update(record.subarray(0, record.length - 16)), d.final()]);
	let end = plain.length - 1;
	while (end > 0 && plain[end] === 0) end--;
	expect(plain[end]).toBe(2); // last-record padding delimiter
	return plain.subarray(0, end).toString("utf8");
}

function verifyVapid(header: string, audience: string, publicKey: string) {
	const m = /^vapid t=([^,]+),\s*k=(.+)$/.exec(header);
	expect(m).not.toBeNull();
	const [, t, k] = m!;
	expect(k).toBe(publicKey);
	const raw = Buffer.from(k, "base64url");
	const key = createPublicKey({ key: { kty: "EC", crv: "P-256", x: raw.subarray(1, 33).toString("base64url"), y: raw.subarray(33, 65).toString("base64url") }, format: "jwk" });
	const [h, pl, sig] = t.split(".");
	expect(JSON.parse(Buffer.from(h, "base64url").toString())).toMatchObject({ alg: "ES256", typ: "JWT" });
	expect(verify("sha256", Buffer.from(`${h}.${pl}`), { key, dsaEncoding: "ieee-p1363" }, Buffer.from(sig, "base64url"))).toBe(true);
	const claims = JSON.parse(Buffer.from(pl, "base64url").toString());
	expect(claims.aud).toBe(audience);
	expect(claims.sub).toBe(`mailto:operator@${p.cfg.rootDomain}`);
	expect(claims.exp * 1000).toBeGreaterThan(Date.now());
}

describe("web push", () => {
	const ua = createECDH("prime256v1");
	ua.generateKeys();
	const auth = randomBytes(16);
	const keys = () => ({ p256dh: ua.getPublicKey().toString("base64url"), auth: auth.toString("base64url") });
	const subscribe = async (pth: string) => {
		const session = (jwt.decode(token) as any).session;
		const r = await leak.http("POST", "/touch/pushes", { token, body: { session, keys: keys(), endpoint: `${pushBase}${pth}`, expiration: 1_900_000_000 } });
		expect(r.status).toBe(200);
		expect(r.body.data.keys).toBeUndefined();
		return r.body.data.id as string;
	};

	test("the push service receives an aes128gcm payload the subscription's private key decrypts, with a valid VAPID JWT", async () => {
		leak.secret(keys().auth, "push auth secret", true);
		const sub = await subscribe("/push/ok/1");
		const r = await sendPush({ push: sub, title: "Hi", body: "there", url: "https://example.com/x", data: { n: 1 } });
		expect(r.data.total).toBe(1);
		expect(r.data.items[0]).toMatchObject({ to: sub, status: "QUEUED", attempt: 1 });
		const hit = await until(() => pushHits.find((h) => h.url === "/push/ok/1"));
		expect(hit.headers["content-encoding"]).toBe("aes128gcm");
		expect(Number(hit.headers.ttl)).toBeGreaterThan(0);
		expect(JSON.parse(decryptPush(hit.body, ua, auth))).toEqual({ title: "Hi", body: "there", url: "https://example.com/x", data: { n: 1 } });
		verifyVapid(String(hit.headers.authorization), pushBase, await vapidPublicKey());
		const h = await until(async () => {
			const d = (await get(`/touch/push-histories/${r.data.items[0].id}`)).body.data;
			return d.status === "SENT" ? d : undefined;
		});
		expect(h.res).toEqual({ status: 201, body: "" });
	});

	test("a 410 marks the attempt GONE and removes the subscription", async () => {
		const sub = await subscribe("/push/gone/1");
		const r = await sendPush({ session: (jwt.decode(token) as any).session, title: "t", body: "b" });
		const mine = r.data.items.find((i: any) => i.to === sub);
		expect(mine).toBeDefined();
		await until(async () => (await get(`/touch/push-histories/${mine!.id}`)).body.data.status === "GONE");
		expect((await get(`/touch/pushes/${sub}`)).status).toBe(404);
	});

	test("a failing push service is retried with backoff, one push-histories record per attempt, then SENT once", async () => {
		const sub = await subscribe("/push/flaky/1");
		await sendPush({ push: sub, title: "retry", body: "me" });
		const q = encodeURIComponent(JSON.stringify({ to: sub }));
		const items = await until(async () => {
			const l = (await get(`/touch/push-histories?query=${q}&pagination=${encodeURIComponent(JSON.stringify({ sort: { attempt: 1 } }))}`)).body;
			return l.items?.some((i: any) => i.status === "SENT") ? l.items : undefined;
		});
		expect(items.map((i: any) => [i.attempt, i.status])).toEqual([
			[1, "RETRIED"],
			[2, "RETRIED"],
			[3, "SENT"],
		]);
		expect(items[0].res).toEqual({ status: 500, body: "busy" });
		await sleep(800);
		expect(pushHits.filter((h) => h.url === "/push/flaky/1")).toHaveLength(3);
	});

	test("a push naming a subscription outside the caller's view answers 404; bad bodies answer 400", async () => {
		await expect(sendPush({ push: "f".repeat(24), title: "t", body: "b" })).rejects.toMatchObject({ code: 404 });
		await expect(sendPush({ title: "t", body: "b" })).rejects.toMatchObject({ code: 400, message: "push or session is required" });
		await expect(sendPush({ push: "f".repeat(24), title: "t", body: "x".repeat(2990), data: { y: "z".repeat(100) } })).rejects.toMatchObject({ code: 400 });
		await expect(sendPush({ push: "f".repeat(24), title: "t", body: "b", keys: {} })).rejects.toMatchObject({
			code: 400,
			message: "keys is not allowed in a push (push, session, title, body, url, data)",
		});
	});

	test("subscription keys are sealed at rest: no data file holds them", async () => {
		const files = readdirSync(p.dataDir, { recursive: true }) as string[];
		for (const f of files) {
			const full = path.join(p.dataDir, f);
			if (!statSync(full).isFile()) continue;
			const text = readFileSync(full, "latin1");
			expect(text.includes(keys().auth)).toBe(false);
			expect(text.includes(keys().p256dh)).toBe(false);
		}
	});
});

describe("sms", () => {
	test("kavenegar with the tenant's SMS config: retried after a 503, then SENT once, with the provider's exact wire shape", async () => {
		const cfg = await leak.http("POST", "/context/configs", {
			token,
			body: { key: "SMS", eid: (jwt.decode(token) as any).cid, value: { kavenegar: { url: smsBase, key: KAV_KEY, from: "10004346" } } },
		});
		expect(cfg.body).toMatchObject({ data: {} });
		expect(cfg.status).toBe(200);
		expect(cfg.body.data.value).toEqual({ kavenegar: { url: smsBase, from: "10004346" } });
		kavFailures = 1;
		const r = await sendSms({ provider: "kavenegar", receptors: ["+989121234567", "+989127654321"], message: "سلام 1" });
		expect(r.data.state).toBe("QUEUED");
		const doc = await until(async () => {
			const d = (await get(`/touch/smss/${r.data.id}`)).body.data;
			return d.state === "SENT" ? d : undefined;
		});
		expect(doc.attempts).toBe(2);
		const hits = smsHits.filter((h) => h.url.startsWith("/v1/"));
		expect(hits).toHaveLength(2);
		for (const h of hits) {
			expect(h.method).toBe("POST");
			expect(h.url).toBe(`/v1/${KAV_KEY}/sms/send.json`);
			expect(h.headers["content-type"]).toBe("application/x-www-form-urlencoded");
			expect(Object.fromEntries(new URLSearchParams(h.body.toString()))).toEqual({ receptor: "+989121234567,+989127654321", message: "سلام 1", sender: "10004346" });
		}
		expect(doc.res.answers[0].body.entries[0].messageid).toBe(8792343);
		await sleep(800);
		expect(smsHits.filter((h) => h.url.startsWith("/v1/"))).toHaveLength(2);
	});

	test("twilio from a template: one request per receptor, form To/From/Body, HTTP Basic sid:token; the answer is kept without the sid", async () => {
		expect(
			(
				await leak.http("POST", "/context/configs", {
					token,
					body: { key: "SMS_TEMPLATE", eid: (jwt.decode(token) as any).cid, value: { name: "otp", text: "Your code is {{code}}" } },
				})
			).status,
		).toBe(200);
		await expect(sendSmsTemplate({ provider: "twilio", receptors: ["+14155550100"], template: "otp", params: {} })).rejects.toMatchObject({
			code: 400,
			message: "params.code is required by the template",
		});
		await expect(sendSmsTemplate({ provider: "twilio", receptors: ["+14155550100"], template: "nope", params: {} })).rejects.toMatchObject({
			code: 404,
			message: "SMS template nope is not defined",
		});
		const before = smsHits.length;
		const r = await sendSmsTemplate({ provider: "twilio", receptors: ["+14155550100", "+14155550101"], template: "otp", params: { code: "4321" } });
		expect(r.data).toMatchObject({ message: "Your code is 4321", template: "otp", state: "QUEUED" });
		const doc = await until(async () => {
			const d = (await get(`/touch/smss/${r.data.id}`)).body.data;
			return d.state === "SENT" ? d : undefined;
		});
		const hits = smsHits.slice(before);
		expect(hits).toHaveLength(2);
		expect(hits.map((h) => Object.fromEntries(new URLSearchParams(h.body.toString())))).toEqual([
			{ To: "+14155550100", From: "+15005550006", Body: "Your code is 4321" },
			{ To: "+14155550101", From: "+15005550006", Body: "Your code is 4321" },
		]);
		for (const h of hits) {
			expect(h.url).toBe(`/2010-04-01/Accounts/${TW_SID}/Messages.json`);
			expect(h.headers.authorization).toBe(`Basic ${Buffer.from(`${TW_SID}:${TW_TOKEN}`).toString("base64")}`);
		}
		expect(doc.res.answers).toHaveLength(2);
		expect(doc.res.answers[0].body.account_sid).toBe("***");
	});
});

describe("notices, health, metrics, leaks", () => {
	test("a notice reaches its owner over MQTT on <root>/owner/<uid>/touch/notices/<id> as it is created", async () => {
		const { url } = (await p.broker.call("preserver.brokerUrl")) as { url: string };
		const uid = (jwt.decode(token) as any).uid;
		const client = await mqtt.connectAsync(url, { username: uid, password: token, reconnectPeriod: 0, clientId: `t-${randomBytes(4).toString("hex")}` });
		try {
			const got: Array<{ topic: string; payload: any }> = [];
			client.on("message", (topic, payload) => got.push({ topic, payload: JSON.parse(payload.toString()) }));
			await client.subscribeAsync(`platform/owner/${uid}/touch/notices/#`, { qos: 1 });
			const r = await leak.http("POST", "/touch/notices", { token, body: { type: "ALERT", title: "Heads up", content: "Something happened" } });
			expect(r.status).toBe(200);
			const m = await until(() => got.find((g) => g.payload.id === r.body.data.id));
			expect(m.topic).toBe(`platform/owner/${uid}/touch/notices/${r.body.data.id}`);
			expect(m.payload).toMatchObject({ op: "c", topic: "touch.notices", after: { title: "Heads up", type: "ALERT" } });
		} finally {
			await client.endAsync();
		}
	});

	test("/status reports each transport; /metrics counts sends, failures and retries per channel and the latency", async () => {
		const s = await leak.http("GET", "/status");
		expect(s.body.info.smtp).toEqual({ status: "up" });
		expect(s.body.info["sms twilio"]).toEqual({ status: "up" });
		expect(s.body.info["web push (vapid)"]).toEqual({ status: "up" });
		const m = await leak.http("GET", "/metrics");
		expect(m.text).toMatch(/publisher_touch_sends_total\{[^}]*channel="email"[^}]*\} \d+/);
		expect(m.text).toMatch(/publisher_touch_sends_total\{[^}]*channel="push"[^}]*\} \d+/);
		expect(m.text).toMatch(/publisher_touch_retries_total\{[^}]*channel="sms"[^}]*\} 1/);
		expect(m.text).toMatch(/publisher_touch_failures_total\{[^}]*channel="push"[^}]*\} \d+/);
		expect(m.text).toMatch(/publisher_touch_delivery_latency_bucket\{[^}]*channel="email",le="\+Inf"\} [1-9]/);
	});

	test("no secret in any response, record, event or data file (VAPID private key only in vapid.json)", async () => {
		for (const c of ["emails", "smss", "pushes", "push-histories", "notices"]) await get(`/touch/${c}?pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`);
		await get(`/context/configs?pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`);
		const vapidPrivate = JSON.parse(readFileSync(path.join(p.dataDir, "vapid.json"), "utf8")).privateKey as string;
		leak.secret(vapidPrivate, "vapid private key", true);
		expect(leak.count).toBeGreaterThan(20);
		expect(leak.leaks()).toEqual([]);
		expect(statSync(path.join(p.dataDir, "vapid.json")).mode & 0o777).toBe(0o600);
		// Records and change events at rest (document files and the outbox).
		const files = readdirSync(p.dataDir, { recursive: true }) as string[];
		for (const f of files) {
			const full = path.join(p.dataDir, f);
			if (!statSync(full).isFile() || f === "vapid.json") continue;
			const text = readFileSync(full, "utf8");
			for (const secret of [SMTP_PASS, KAV_KEY, TW_TOKEN, vapidPrivate]) expect(`${f}: ${text.includes(secret)}`).toBe(`${f}: false`);
		}
	});
});
