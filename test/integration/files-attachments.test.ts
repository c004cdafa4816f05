/**
 * Email attachments (issue 12, Files): `attachments` of touch/emails are special/files ids resolved through the blob
 * store. Each is a file the caller can GET when the email is written (send, create, patch: 404 `file <id> not found`,
 * nothing queued); at delivery the email's owner must still be able to read each file in its tenant, else the email
 * FAILS with `attachment <id> is not available` (no retry). A real SMTP server (smtp-server) receives the messages.
 */
import { SMTPServer } from "smtp-server";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";

jest.setTimeout(90_000);

let p: TestPlatform;
let smtp: SMTPServer;
let root: string;
const mails: string[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function uploadAs(token: string, content: string, name: string): Promise<string> {
	const fd = new FormData();
	fd.append("name", name);
	fd.append("file", new Blob([content], { type: "text/plain" }), name);
	const r = await fetch(`${p.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${token}` } });
	expect(r.status).toBe(200);
	return ((await r.json()) as any).items[0].id;
}

const emailBody = (attachments: string[], extra: Record<string, unknown> = {}) => ({
	provider: "nodemailer",
	to: ["to@example.com"],
	from: "from@example.com",
	subject: `attachments ${attachments.join(",")}`,
	text: "see attached",
	attachments,
	...extra,
});

/** Queues an email (a future `date` schedules it; `meanwhile` runs once it is queued), then waits for its end. */
async function email(attachments: string[], extra: Record<string, unknown> = {}, meanwhile?: () => Promise<void>): Promise<any> {
	const r = await p.http("POST", "/touch/emails", { token: root, body: emailBody(attachments, extra) });
	expect(r.status).toBe(200);
	const id = r.body.data.id;
	await meanwhile?.();
	const end = Date.now() + 20_000;
	for (;;) {
		const d = (await p.http("GET", `/touch/emails/${id}`, { token: root })).body.data;
		if (d.state === "SENT" || d.state === "FAILED") return d;
		if (Date.now() > end) throw new Error(`email ${id} still ${d.state}`);
		await sleep(100);
	}
}

beforeAll(async () => {
	smtp = new SMTPServer({
		disabledCommands: ["STARTTLS", "AUTH"],
		onData(stream, _s, cb) {
			let raw = "";
			stream.on("data", (c) => (raw += c.toString()));
			stream.on("end", () => {
				mails.push(raw);
				cb();
			});
		},
		logger: false,
	});
	const port = await new Promise<number>((resolve) => smtp.listen(0, "127.0.0.1", () => resolve((smtp.server.address() as any).port)));
	p = await bootPlatform({ smtpUrl: `smtp://127.0.0.1:${port}`, touchRetrySchedule: [0, 0.3] });
	root = await p.rootToken();
}, 60_000);
afterAll(async () => {
	await p?.cleanup();
	await new Promise<void>((r) => smtp.close(() => r()));
});

test("the owner's own files are attached with their name, type and content", async () => {
	const a = await uploadAs(root, "first attachment body", "report.txt");
	const b = await uploadAs(root, "second one", "notes.txt");
	const d = await email([a, b]);
	expect(d.state).toBe("SENT");
	const raw = mails.find((m) => m.includes(`attachments ${a},${b}`))!;
	expect(raw).toBeDefined();
	expect(raw).toMatch(/filename=report\.txt/);
	expect(raw).toMatch(/filename=notes\.txt/);
	const bodies = [...raw.matchAll(/\r\n\r\n([A-Za-z0-9+/=\r\n]+?)\r\n--/g)].map((m) => Buffer.from(m[1].replace(/\s/g, ""), "base64").toString());
	expect(raw.includes("first attachment body") || bodies.includes("first attachment body")).toBe(true);
	expect(raw.includes("second one") || bodies.includes("second one")).toBe(true);
});

test("a soft-deleted file or an unknown id is refused when the email is written (send, create, patch): 404, nothing queued", async () => {
	const gone = await uploadAs(root, "deleted", "gone.txt");
	expect((await p.http("DELETE", `/special/files/${gone}`, { token: root })).status).toBe(200);
	const kept = await uploadAs(root, "kept", "kept.txt");
	const queued = (await p.http("POST", "/touch/emails", { token: root, body: emailBody([kept], { date: new Date(Date.now() + 3_600_000).toISOString() }) })).body.data.id;
	for (const id of [gone, "0123456789abcdef01234567"]) {
		const answers = [
			await p.http("POST", "/touch/emails/send", { token: root, body: emailBody([kept, id]) }),
			await p.http("POST", "/touch/emails", { token: root, body: emailBody([kept, id]) }),
			await p.http("PATCH", `/touch/emails/${queued}`, { token: root, body: { attachments: [kept, id] } }),
		];
		expect(answers.map((r) => [r.status, r.body?.message])).toEqual(Array(3).fill([404, `file ${id} not found`]));
		const counted = await p.http("GET", `/touch/emails/count?query=${encodeURIComponent(JSON.stringify({ attachments: id }))}`, { token: root });
		expect(counted.body.total).toBe(0);
	}
	expect((await p.http("GET", `/touch/emails/${queued}`, { token: root })).body.data.attachments).toEqual([kept]);
});

test("a file the owner may not read, or one deleted once the email is queued: FAILED at delivery, not retried, nothing sent", async () => {
	const username = `att-${process.pid}`;
	const u = await createUser(p.http, root, { username, password: "pw-attach-user-1", subjects: [] } as any);
	await p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, action: "upload", object: "special:files" } });
	const t = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-attach-user-1" })).access_token;
	// In root's view (its tenant's file), but neither owned by nor shared with root, the email's owner.
	const theirs = await uploadAs(t, "not root's", "theirs.txt");
	// Deleted after the email was queued (scheduled a moment later), before it is delivered.
	const later = await uploadAs(root, "deleted later", "later.txt");
	const deleteLater = async () => expect((await p.http("DELETE", `/special/files/${later}`, { token: root })).status).toBe(200);
	for (const [id, extra, meanwhile] of [
		[theirs, {}, undefined],
		[later, { date: new Date(Date.now() + 1500).toISOString() }, deleteLater],
	] as const) {
		const d = await email([id], extra, meanwhile);
		expect(d.state).toBe("FAILED");
		expect(d.reason).toBe(`attachment ${id} is not available`);
		expect(d.attempts).toBe(1);
		expect(mails.some((m) => m.includes(`attachments ${id}`))).toBe(false);
	}
});
