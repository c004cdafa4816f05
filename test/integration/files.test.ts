/**
 * Issue 12, Files (docs/contracts.md "Files", docs/files.md): multipart upload streamed to the blob store, public download
 * (bearer, share key, expired and revoked keys, soft-deleted file, other tenant, Range, etag), the size limit (413),
 * the authority layer on upload and share, content removed by destroy and by the cleaner's purge, orphans of an
 * interrupted upload collected, and memory: 20 concurrent 5 MiB uploads raise RSS by less than 100 MiB.
 */
import { createHash } from "crypto";
import http from "http";
import { existsSync, readdirSync, readFileSync, utimesSync, writeFileSync, mkdirSync } from "fs";
import path from "path";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { storedText, storedTexts } from "../helpers/stored";
import { createClient, createUser, tokenOf } from "../helpers/auth";
import { streamedUpload } from "../helpers/upload";
import { sleep } from "../helpers/wait";
import type { CleanerPass } from "../../workers/cleaner.worker";

jest.setTimeout(120_000);

let p: TestPlatform;
let root: string;
const MiB = 1024 * 1024;
const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.from("rest-of-a-png-marker-7f3a")]);
const NOT_FOUND = { statusCode: 404, message: "document not found", error: "Not Found" };

const filesDir = () => path.join(p.dataDir, "files");
const listDir = (d: string) => (existsSync(d) ? readdirSync(d) : []);
const blobCount = () => listDir(filesDir()).filter((n) => !n.startsWith(".")).length;
const blobExists = (id: string) => existsSync(path.join(filesDir(), id));
const store = () => (p.broker.getLocalService("special") as any).collectionStore("files");

async function upload(token: string | undefined, parts: Array<{ content: Buffer | string; filename?: string; type?: string; name?: string }>) {
	const fd = new FormData();
	for (const part of parts) {
		if (part.name !== undefined) fd.append("name", part.name);
		fd.append("file", new Blob([part.content], { type: part.type ?? "application/octet-stream" }), part.filename ?? "f.bin");
	}
	const res = await fetch(`${p.url}/special/files/upload`, { method: "POST", body: fd, headers: token ? { authorization: `Bearer ${token}` } : {} });
	const text = await res.text();
	let body: any = text;
	try {
		body = JSON.parse(text);
	} catch {
		/* not JSON */
	}
	return { status: res.status, body };
}

async function uploadOne(token: string, content: Buffer | string, extra: { filename?: string; type?: string; name?: string } = {}) {
	const r = await upload(token, [{ content, ...extra }]);
	if (r.status !== 200) throw new Error(`upload: ${r.status} ${JSON.stringify(r.body)}`);
	return r.body.items[0];
}

async function download(id: string, opts: { token?: string; key?: string; headers?: Record<string, string>; query?: string } = {}) {
	const qs = [opts.key !== undefined ? `key=${encodeURIComponent(opts.key)}` : "", opts.query ?? ""].filter(Boolean).join("&");
	const res = await fetch(`${p.url}/special/files/${id}/download${qs ? `?${qs}` : ""}`, {
		headers: { ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...(opts.headers ?? {}) },
	});
	const buf = Buffer.from(await res.arrayBuffer());
	let body: any = buf;
	if ((res.headers.get("content-type") ?? "").startsWith("application/json")) body = JSON.parse(buf.toString("utf8"));
	return { status: res.status, headers: res.headers, body, buf };
}

async function shareOf(token: string, id: string, body: unknown = {}) {
	return p.http("POST", `/special/files/${id}/share`, { token, body });
}

async function grant(subject: string, action: string, object = "special:files") {
	const r = await p.http("POST", "/auth/grants", { token: root, body: { subject, action, object } });
	if (r.status !== 200) throw new Error(`grant: ${r.status} ${r.text}`);
}

let seq = 0;
async function userWith(actions: string[], scopes?: string[]): Promise<{ id: string; token: string }> {
	const username = `files-${process.pid}-${++seq}`;
	const u = await createUser(p.http, root, { username, password: "pw-files-user-1", subjects: [] } as any);
	for (const a of actions) await grant(`${u.id}@${p.root.domain}`, a);
	const t = await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: "pw-files-user-1", ...(scopes ? { scopes } : {}) });
	return { id: u.id, token: t.access_token };
}

const run = () => p.broker.call("cleaner.run") as Promise<CleanerPass>;

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
}, 60_000);
afterAll(async () => {
	await p?.cleanup();
});

describe("upload", () => {
	test("a file part becomes a record { id, name, mimetype, size, sha256 } with its content in DATA_DIR/files, never in the document store", async () => {
		const r = await upload(root, [{ content: PNG, filename: "pic.png", type: "text/html" }]);
		expect(r.status).toBe(200);
		expect(r.body.total).toBe(1);
		const f = r.body.items[0];
		expect(f).toMatchObject({
			id: expect.stringMatching(/^[0-9a-f]{24}$/),
			name: "pic.png",
			mimetype: "image/png",
			size: PNG.length,
			sha256: createHash("sha256").update(PNG).digest("hex"),
		});
		expect(f.storage).toBeUndefined();
		expect(f.share_keys).toBeUndefined();
		expect(readFileSync(path.join(filesDir(), f.id)).equals(PNG)).toBe(true);
		// The content is nowhere in the document store (nor in the outbox), on either store.
		const stored = await storedTexts(p);
		expect(Object.keys(stored).length).toBeGreaterThan(3);
		expect(stored["special/files"]).toContain(f.id);
		for (const [name, text] of Object.entries(stored)) expect({ name, content: text.includes("rest-of-a-png-marker-7f3a") }).toEqual({ name, content: false });
		// The record reads back through the standard pattern, without internal fields.
		const got = await p.http("GET", `/special/files/${f.id}`, { token: root });
		expect(got.body.data).toMatchObject({ id: f.id, name: "pic.png", mimetype: "image/png", size: PNG.length });
		expect(got.body.data.storage).toBeUndefined();
	});

	test("several file parts; a name field names the part after it; declared types are never trusted for active content", async () => {
		const r = await upload(root, [
			{ content: "<script>alert(1)</script>", filename: "x.html", type: "text/html", name: "notes.html" },
			{ content: Buffer.from([0, 1, 2, 3, 255]), filename: "blob.dat", type: "image/svg+xml" },
			{ content: "a,b\n1,2\n", filename: "t.csv", type: "text/csv" },
		]);
		expect(r.status).toBe(200);
		expect(r.body.total).toBe(3);
		expect(r.body.items.map((i: any) => [i.name, i.mimetype])).toEqual([
			["notes.html", "text/plain"],
			["blob.dat", "application/octet-stream"],
			["t.csv", "text/csv"],
		]);
	});

	test("a body that is not multipart answers 415; no file part 400; another part name 400", async () => {
		const json = await p.http("POST", "/special/files/upload", { token: root, body: { name: "x" } });
		expect(json.status).toBe(415);
		expect(json.body).toEqual({ statusCode: 415, message: "body must be multipart/form-data", error: "Unsupported Media Type" });
		const fd = new FormData();
		fd.append("name", "lonely");
		const none = await fetch(`${p.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${root}` } });
		expect(none.status).toBe(400);
		expect(await none.json()).toEqual({ statusCode: 400, message: "file is required", error: "Bad Request" });
		const fd2 = new FormData();
		fd2.append("other", new Blob(["x"]), "x.txt");
		const other = await fetch(`${p.url}/special/files/upload`, { method: "POST", body: fd2, headers: { authorization: `Bearer ${root}` } });
		expect(await other.json()).toEqual({ statusCode: 400, message: "other is not allowed: file parts are named file", error: "Bad Request" });
		// Without a token, the upload is refused like any API call.
		expect((await upload(undefined, [{ content: "x" }])).status).toBe(401);
	});

	test("8 MiB is the limit: exactly 8 MiB is stored, one byte more answers 413 without keeping anything", async () => {
		const before = blobCount();
		const ok = await streamedUpload(`${p.url}/special/files/upload`, root, 8 * MiB);
		expect(ok.status).toBe(200);
		expect(ok.body.items[0].size).toBe(8 * MiB);
		const over = await streamedUpload(`${p.url}/special/files/upload`, root, 8 * MiB + 1);
		expect(over.status).toBe(413);
		expect(over.body).toEqual({ statusCode: 413, message: "file is larger than 8388608 bytes", error: "Payload Too Large" });
		// Far above the limit: refused from the declared length, before any of the body is sent.
		const huge = await new Promise<{ status: number; body: any }>((resolve, reject) => {
			const u = new URL(`${p.url}/special/files/upload`);
			const req = http.request(
				{
					host: u.hostname,
					port: u.port,
					path: u.pathname,
					method: "POST",
					headers: { authorization: `Bearer ${root}`, "content-type": "multipart/form-data; boundary=xyz", "content-length": String(200 * MiB) },
				},
				(res) => {
					let text = "";
					res.on("data", (c) => (text += c));
					res.on("end", () => {
						req.destroy();
						resolve({ status: res.statusCode!, body: JSON.parse(text) });
					});
				},
			);
			req.on("error", reject);
			req.flushHeaders();
		});
		expect(huge).toEqual({ status: 413, body: { statusCode: 413, message: "file is larger than 8388608 bytes", error: "Payload Too Large" } });
		await sleep(200);
		expect(blobCount()).toBe(before + 1);
		expect(listDir(path.join(filesDir(), ".incoming"))).toEqual([]);
	});
});

describe("download", () => {
	let file: any;
	const CONTENT = Buffer.from("0123456789abcdefghij");
	beforeAll(async () => {
		file = await uploadOne(root, CONTENT, { filename: "ignored.txt", name: 'résumé "final".txt', type: "text/plain" });
	});

	test("with a bearer (header, ?token=, cookie): content, type, length, etag, content-disposition, nosniff", async () => {
		for (const opts of [{ token: root }, { query: `token=${root}` }, { headers: { cookie: `authorization=${encodeURIComponent(`Bearer ${root}`)}` } }]) {
			const r = await download(file.id, opts);
			expect(r.status).toBe(200);
			expect(r.buf.equals(CONTENT)).toBe(true);
			expect(r.headers.get("content-type")).toBe("text/plain; charset=utf-8");
			expect(r.headers.get("content-length")).toBe(String(CONTENT.length));
			expect(r.headers.get("etag")).toBe(`"${file.sha256}"`);
			expect(r.headers.get("content-disposition")).toBe(`inline; filename="r_sum_ _final_.txt"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22final%22.txt`);
			expect(r.headers.get("x-content-type-options")).toBe("nosniff");
			expect(r.headers.get("accept-ranges")).toBe("bytes");
		}
	});

	test("Range: 206 with Content-Range (first, suffix, open-ended); 416 past the end; If-None-Match 304", async () => {
		const a = await download(file.id, { token: root, headers: { range: "bytes=0-3" } });
		expect(a.status).toBe(206);
		expect(a.buf.toString()).toBe("0123");
		expect(a.headers.get("content-range")).toBe("bytes 0-3/20");
		expect(a.headers.get("content-length")).toBe("4");
		const b = await download(file.id, { token: root, headers: { range: "bytes=-5" } });
		expect([b.status, b.buf.toString(), b.headers.get("content-range")]).toEqual([206, "fghij", "bytes 15-19/20"]);
		const c = await download(file.id, { token: root, headers: { range: "bytes=18-" } });
		expect([c.status, c.buf.toString(), c.headers.get("content-range")]).toEqual([206, "ij", "bytes 18-19/20"]);
		const d = await download(file.id, { token: root, headers: { range: "bytes=20-30" } });
		expect(d.status).toBe(416);
		expect(d.body).toEqual({ statusCode: 416, message: "range not satisfiable", error: "Range Not Satisfiable" });
		expect(d.headers.get("content-range")).toBe("bytes */20");
		const e = await download(file.id, { token: root, headers: { "if-none-match": `"${file.sha256}"` } });
		expect(e.status).toBe(304);
	});

	test("without key or bearer, with a bad bearer, an unknown or malformed id: 404, never 401/403", async () => {
		expect(await download(file.id)).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download(file.id, { token: "not-a-token" })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download(file.id, { key: "guessed-key" })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download("0123456789abcdef01234567", { token: root })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download("..%2F..%2Fkeys.json", { token: root })).toMatchObject({ status: 404, body: NOT_FOUND });
	});

	test("share keys: the path works without a token; ttl bounds; an expired key and revoked keys answer 404", async () => {
		const s = await shareOf(root, file.id);
		expect(s.status).toBe(200);
		expect(s.body.data).toEqual({
			path: `/special/files/${file.id}/download?key=${s.body.data.key}`,
			key: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/),
			expires_at: expect.any(String),
		});
		expect(Math.abs(Date.parse(s.body.data.expires_at) - Date.now() - 3600_000)).toBeLessThan(10_000);
		const viaPath = await fetch(p.url + s.body.data.path);
		expect(viaPath.status).toBe(200);
		expect(Buffer.from(await viaPath.arrayBuffer()).equals(CONTENT)).toBe(true);
		// The key is stored hashed: not in the record's file.
		const raw = await storedText(p, "special/files");
		expect(raw).not.toContain(s.body.data.key);
		expect(raw).toContain(createHash("sha256").update(s.body.data.key).digest("hex"));

		for (const [body, message] of [
			[{ ttl: 0 }, "ttl must be an integer from 1 to 2592000"],
			[{ ttl: 2592001 }, "ttl must be an integer from 1 to 2592000"],
			[{ ttl: "60" }, "ttl must be an integer from 1 to 2592000"],
			[{ type: "LINK" }, "type must be UNLINK"],
			[{ type: "UNLINK", ttl: 5 }, "ttl is not allowed with type UNLINK"],
			[{ path: "/x" }, "path is not allowed"],
		] as const) {
			const bad = await shareOf(root, file.id, body);
			expect(bad.body).toEqual({ statusCode: 400, message, error: "Bad Request" });
		}
		const longest = await shareOf(root, file.id, { ttl: 2592000 });
		expect(Math.abs(Date.parse(longest.body.data.expires_at) - Date.now() - 2592000_000)).toBeLessThan(10_000);

		const short = await shareOf(root, file.id, { ttl: 1 });
		expect((await download(file.id, { key: short.body.data.key })).status).toBe(200);
		await sleep(1200);
		expect(await download(file.id, { key: short.body.data.key })).toMatchObject({ status: 404, body: NOT_FOUND });

		const again = await shareOf(root, file.id, { ttl: 600 });
		const revoke = await shareOf(root, file.id, { type: "UNLINK" });
		expect(revoke.status).toBe(200);
		expect(revoke.body).toEqual({ data: { revoked: 3 } });
		for (const k of [s.body.data.key, again.body.data.key, longest.body.data.key]) expect(await download(file.id, { key: k })).toMatchObject({ status: 404, body: NOT_FOUND });
		// The bearer still works; a new key works again.
		expect((await download(file.id, { token: root })).status).toBe(200);
		expect((await download(file.id, { key: (await shareOf(root, file.id)).body.data.key })).status).toBe(200);
		// Sharing an unknown file.
		expect((await shareOf(root, "0123456789abcdef01234567")).body).toEqual(NOT_FOUND);
	});

	test("a soft-deleted file is not downloadable (bearer, key, even with x-exclude-soft-delete-query); restored, it is again", async () => {
		const f = await uploadOne(root, "soft");
		const key = (await shareOf(root, f.id)).body.data.key;
		expect((await p.http("DELETE", `/special/files/${f.id}`, { token: root })).status).toBe(200);
		expect(await download(f.id, { token: root })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download(f.id, { token: root, headers: { "x-exclude-soft-delete-query": "1" } })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download(f.id, { key })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await shareOf(root, f.id)).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(blobExists(f.id)).toBe(true);
		expect((await p.http("PUT", `/special/files/${f.id}/restore`, { token: root })).status).toBe(200);
		expect((await download(f.id, { key })).buf.toString()).toBe("soft");
	});
});

describe("the authority layer on upload, share and download", () => {
	test("no scope, no grant: 403 on upload and share; the download of a file outside the caller's view is 404", async () => {
		const mine = await uploadOne(root, "root's file");
		const noGrant = await userWith([]);
		expect((await upload(noGrant.token, [{ content: "x" }])).body).toEqual({ statusCode: 403, message: "no grant for upload on special:files", error: "Forbidden" });
		expect((await shareOf(noGrant.token, mine.id)).body).toEqual({ statusCode: 403, message: "no grant for share on special:files", error: "Forbidden" });
		expect(await download(mine.id, { token: noGrant.token })).toMatchObject({ status: 404, body: NOT_FOUND });

		const noScope = await userWith(["upload", "share", "read"], ["read:content:notes"]);
		expect((await upload(noScope.token, [{ content: "x" }])).body).toEqual({ statusCode: 403, message: "token scope does not cover upload:special:files", error: "Forbidden" });
		expect((await shareOf(noScope.token, mine.id)).body).toEqual({ statusCode: 403, message: "token scope does not cover share:special:files", error: "Forbidden" });
		expect(await download(mine.id, { token: noScope.token })).toMatchObject({ status: 404, body: NOT_FOUND });

		// Allowed, but root's file is outside the user's view (zones own, share): 404 on share and download.
		const user = await userWith(["upload", "share", "read"]);
		const own = await uploadOne(user.token, "user's file");
		expect((await download(own.id, { token: user.token })).buf.toString()).toBe("user's file");
		expect((await shareOf(user.token, own.id)).status).toBe(200);
		expect((await shareOf(user.token, mine.id)).body).toEqual(NOT_FOUND);
		expect(await download(mine.id, { token: user.token })).toMatchObject({ status: 404, body: NOT_FOUND });
		// Shared with the user (the document's `shares`), the file is in its view.
		expect((await p.http("PATCH", `/special/files/${mine.id}`, { token: root, body: { shares: [user.id] } })).status).toBe(200);
		expect((await download(mine.id, { token: user.token })).buf.toString()).toBe("root's file");
	});

	test("another tenant's file id: 404 on download and share, for every carrier of its bearer", async () => {
		const c = await createClient(p.http, root, { name: "files-tenant-b", domains: ["files-b.example"], scopes: ["whole"] });
		for (const a of ["read", "upload", "share"]) await grant(`${c.id}@files-b.example`, a);
		const b = (await tokenOf(p.http, { grant_type: "client_credential", client_id: c.id, client_secret: c.secret })).access_token;
		const theirs = await uploadOne(b, "tenant b");
		const ours = await uploadOne(root, "tenant root");
		expect((await download(theirs.id, { token: b })).buf.toString()).toBe("tenant b");
		expect(await download(ours.id, { token: b })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(await download(ours.id, { query: `token=${b}` })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect((await shareOf(b, ours.id)).body).toEqual(NOT_FOUND);
		// And the other way round.
		expect(await download(theirs.id, { token: root })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect((await shareOf(root, theirs.id)).body).toEqual(NOT_FOUND);
		// A key B made for its own file opens that file only.
		const key = (await shareOf(b, theirs.id)).body.data.key;
		expect(await download(ours.id, { key })).toMatchObject({ status: 404, body: NOT_FOUND });
	});

	test("the OpenAPI document describes upload (multipart), share (body and answer) and the public download", async () => {
		const doc = (await p.http("GET", "/api-json")).body;
		const up = doc.paths["/special/files/upload"].post;
		expect(Object.keys(up.requestBody.content)).toEqual(["multipart/form-data"]);
		expect(up.requestBody.content["multipart/form-data"].schema.properties.file.items).toEqual({ type: "string", format: "binary" });
		expect(up.responses["200"].content["application/json"].schema.required).toEqual(["items", "total"]);
		expect(Object.keys(up.responses)).toEqual(expect.arrayContaining(["413", "415", "403"]));
		const sh = doc.paths["/special/files/{id}/share"].post;
		expect(Object.keys(sh.requestBody.content["application/json"].schema.properties).sort()).toEqual(["ttl", "type"]);
		expect(Object.keys(sh.responses["200"].content["application/json"].schema.properties.data.properties)).toEqual(["path", "key", "expires_at", "revoked"]);
		const dl = doc.paths["/special/files/{id}/download"].get;
		expect(dl.security).toEqual([]);
		expect(Object.keys(dl.responses)).toEqual(expect.arrayContaining(["200", "206", "304", "404", "416"]));
	});
});

describe("content lifecycle", () => {
	test("destroy removes the content; the cleaner's purge removes the content of purged records", async () => {
		const a = await uploadOne(root, "to destroy");
		expect(blobExists(a.id)).toBe(true);
		expect((await p.http("DELETE", `/special/files/${a.id}/destroy`, { token: root })).status).toBe(200);
		expect(blobExists(a.id)).toBe(false);

		const b = await uploadOne(root, "to purge");
		expect((await p.http("DELETE", `/special/files/${b.id}`, { token: root })).status).toBe(200);
		await store().setOne(b.id, { deleted_at: new Date(Date.now() - 40 * 24 * 3600_000).toISOString() });
		expect(blobExists(b.id)).toBe(true);
		const pass = await run();
		expect(pass.errors).toEqual([]);
		expect(pass.documents).toMatchObject({ "special/files": 1 });
		expect(blobExists(b.id)).toBe(false);
	});

	test("a destroy inside a saga keeps the content: the aborted saga brings the record back, downloadable", async () => {
		const f = await uploadOne(root, "staged");
		const saga = (await p.http("POST", "/essential/sagas/start", { token: root, body: { ttl: 60 } })).body.data.id;
		expect((await p.http("DELETE", `/special/files/${f.id}/destroy`, { token: root, headers: { "x-saga-session": saga } })).status).toBe(200);
		expect(await download(f.id, { token: root })).toMatchObject({ status: 404, body: NOT_FOUND });
		expect(blobExists(f.id)).toBe(true);
		expect((await p.http("GET", `/essential/sagas/${saga}/abort`, { token: root })).body.data.state).toBe("ABORTED");
		expect((await download(f.id, { token: root })).buf.toString()).toBe("staged");
	});

	test("an interrupted upload leaves no record, no blob and no spool file; a crash's leftovers go at the cleaner's pass after the grace period", async () => {
		const count = async () => store().count({});
		const live = await uploadOne(root, "a live file");
		const records = await count();
		const blobs = blobCount();
		const cut = await streamedUpload(`${p.url}/special/files/upload`, root, 6 * MiB, { abortAfter: 3 * MiB });
		expect(cut.status).toBe(0);
		await sleep(500);
		expect(await count()).toBe(records);
		expect(blobCount()).toBe(blobs);
		expect(listDir(path.join(filesDir(), ".incoming"))).toEqual([]);

		// A crash between blob and record (or mid-spool): content without a record, aged past the grace period.
		const old = (Date.now() - 2 * 3600_000) / 1000;
		const orphan = "0123456789abcdef0123aaaa";
		writeFileSync(path.join(filesDir(), orphan), "orphaned");
		utimesSync(path.join(filesDir(), orphan), old, old);
		writeFileSync(path.join(filesDir(), ".incoming", "dead.spool"), "partial");
		utimesSync(path.join(filesDir(), ".incoming", "dead.spool"), old, old);
		mkdirSync(path.join(filesDir(), ".partial"), { recursive: true });
		writeFileSync(path.join(filesDir(), ".partial", "dead.part"), "partial");
		utimesSync(path.join(filesDir(), ".partial", "dead.part"), old, old);
		// A fresh one (an upload in flight right now) stays.
		const fresh = "0123456789abcdef0123bbbb";
		writeFileSync(path.join(filesDir(), fresh), "in flight");
		const pass = await run();
		expect(pass.errors).toEqual([]);
		expect(pass.blobs).toBe(3);
		expect(existsSync(path.join(filesDir(), orphan))).toBe(false);
		expect(listDir(path.join(filesDir(), ".incoming"))).toEqual([]);
		expect(listDir(path.join(filesDir(), ".partial"))).toEqual([]);
		expect(existsSync(path.join(filesDir(), fresh))).toBe(true);
		expect(blobExists(live.id)).toBe(true);
	});
});

describe("memory", () => {
	test("20 concurrent 5 MiB uploads raise the process RSS by less than 100 MiB", async () => {
		// Warm up (first-use allocations), then measure from a settled baseline.
		await streamedUpload(`${p.url}/special/files/upload`, root, 5 * MiB);
		(global as any).gc?.();
		await sleep(200);
		const base = process.memoryUsage().rss;
		let peak = base;
		const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
		try {
			const results = await Promise.all(Array.from({ length: 20 }, (_, i) => streamedUpload(`${p.url}/special/files/upload`, root, 5 * MiB, { fill: 0x41 + i })));
			expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
			expect(new Set(results.map((r) => r.body.items[0].sha256)).size).toBe(20);
		} finally {
			clearInterval(timer);
		}
		peak = Math.max(peak, process.memoryUsage().rss);
		const rise = (peak - base) / MiB;
		console.log(`RSS rise during 20 concurrent 5 MiB uploads: ${rise.toFixed(1)} MiB`);
		expect(rise).toBeLessThan(100);
	});
});
