/**
 * Email attachments (issue 12, Files): `attachments` of touch/emails are special/files ids resolved through the blob
 * store; the email's owner must be able to read each file in its tenant, else the email FAILS with
 * `attachment <id> is not available` (no retry). A real SMTP server (smtp-server) receives the messages.
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

async function email(attachments: string[]): Promise<any> {
	const r = await p.http("POST", "/touch/emails", {
		token: root,
		body: { provider: "nodemailer", to: ["to@example.com"], from: "from@example.com", subject: `attachments ${attachments.join(",")}`, text: "see attached", attachments },
	});
	expect(r.status).toBe(200);
	const id = r.body.data.id;
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

test("a file the owner may not read, a soft-deleted file or an unknown id: FAILED, not retried, nothing sent", async () => {
	const username = `att-${process.pid}`;
	const u = await createUser(p.http, root, { username, password: "pw-attach-user-1", subjects: [] } as any);
	await p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, action: "upload", object: "special:files" } });
	const t = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-attach-user-1" })).access_token;
	const theirs = await uploadAs(t, "not root's", "theirs.txt");
	const gone = await uploadAs(root, "deleted", "gone.txt");
	expect((await p.http("DELETE", `/special/files/${gone}`, { token: root })).status).toBe(200);
	for (const id of [theirs, gone, "0123456789abcdef01234567"]) {
		const d = await email([id]);
		expect(d.state).toBe("FAILED");
		expect(d.reason).toBe(`attachment ${id} is not available`);
		expect(d.attempts).toBe(1);
		expect(mails.some((m) => m.includes(`attachments ${id}`))).toBe(false);
	}
});
