/**
 * Issue 24, Idempotency-Key on the multipart upload (docs/api.md "Retrying safely", "Uploads"), on both document
 * stores with two tenants: the key is claimed before the body streams, the fingerprint is the parsed form (fields,
 * file parts' field, filename, type and content digest), not its bytes. A retry with another boundary replays (no
 * second file, blob or change event); other content, names, query or a JSON request under the key: 422; a repeat while
 * the first streams: 409 before its body is read; keys per principal; a losing attempt's blob removed (PostgreSQL: no
 * record either); the size limits hold for first requests and repeats; a lost answer rebuilt as `{ items, total }`.
 */
import { createHash } from "crypto";
import { existsSync, readdirSync } from "fs";
import path from "path";
import { Readable } from "stream";
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { IdempotencyStoreRef, IN_PROGRESS, KEY_REUSED, type IdemRecord } from "../../engine/idempotency-record";
import { openApiDocument } from "../../lib/openapi";
import { answerOf, postMultipart } from "../helpers/upload";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(180_000);

/** FILE_MAX_BYTES of these platforms: small, so that "over the limit" costs little. */
const MAX = 64 * 1024;
const K = "idempotency-key";
const REPLAYED = "idempotent-replayed";
let n = 0;
const key = () => `upload-key-${Date.now()}-${++n}`;
const recordId = (who: string, k: string) => createHash("sha256").update(`${who}\n${k}`).digest("base64url");

type Part = { name: string } | { field?: string; filename: string; type?: string; content: Buffer | string };

/** A multipart body of `parts` under `boundary`: `{ name }` is a name field, the others file parts. */
function form(boundary: string, parts: Part[]): Buffer {
	const out: Buffer[] = [];
	for (const p of parts) {
		if ("name" in p) out.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n${p.name}\r\n`));
		else {
			out.push(
				Buffer.from(
					`--${boundary}\r\nContent-Disposition: form-data; name="${p.field ?? "file"}"; filename="${p.filename}"\r\nContent-Type: ${p.type ?? "application/octet-stream"}\r\n\r\n`,
				),
			);
			out.push(Buffer.from(p.content), Buffer.from("\r\n"));
		}
	}
	out.push(Buffer.from(`--${boundary}--\r\n`));
	return Buffer.concat(out);
}

type Answer = Awaited<ReturnType<typeof answerOf>>;

/**
 * POSTs `chunks` as one multipart body under `boundary` (Content-Length set unless `chunked`); `between` runs after
 * the first chunk is written (to hold a request mid-body).
 */
function send(
	t: Tenancy,
	token: string,
	boundary: string,
	chunks: Buffer[],
	headers: Record<string, string> = {},
	opts: { between?: () => Promise<void>; path?: string; chunked?: boolean } = {},
): Promise<Answer> {
	const length = chunks.reduce((s, c) => s + c.length, 0);
	return new Promise((resolve, reject) => {
		const req = postMultipart(
			`${t.p.url}${opts.path ?? "/special/files/upload"}`,
			token,
			boundary,
			{ ...(opts.chunked ? {} : { "content-length": String(length) }), ...headers },
			(res) => answerOf(res).then(resolve, reject),
		);
		// A server that answers before reading the whole body may close the connection: the answer still counts.
		req.on("error", (err) => (req.writableEnded ? undefined : reject(err)));
		void (async () => {
			for (let i = 0; i < chunks.length; i++) {
				if (!req.write(chunks[i])) await new Promise((r) => req.once("drain", r));
				if (i === 0 && opts.between) await opts.between();
			}
			req.end();
		})().catch(reject);
	});
}

const boundaryOf = (tag: string) => `----idem-${tag}-${Math.random().toString(16).slice(2)}`;
/** One whole form, under a fresh boundary each time. */
const upload = (t: Tenancy, token: string, parts: Part[], k?: string, opts: { path?: string; chunked?: boolean } = {}) => {
	const b = boundaryOf(String(++n));
	return send(t, token, b, [form(b, parts)], k === undefined ? {} : { [K]: k }, opts);
};

describe("Idempotency-Key on uploads", () => {
	let t: Tenancy;
	let records: IdempotencyStoreRef;
	beforeAll(async () => {
		t = await bootTenancy({ fileMaxBytes: MAX });
		// Each tenant admin lets its editors upload (`manage` does not cover a special action).
		for (const tn of [t.a, t.b]) await t.grant(tn.admin.token, { subject: `@editor@${tn.domain}`, action: "upload", object: "special:files" });
		records = new IdempotencyStoreRef(t.p.cfg);
	});
	afterAll(async () => {
		await records?.release();
		await t?.cleanup();
	});

	const filesDir = () => path.join(t.p.dataDir, "files");
	/** Blobs on the local blob store (the spool directory and partial writes start with a dot). */
	const blobCount = () => (existsSync(filesDir()) ? readdirSync(filesDir()).filter((f) => !f.startsWith(".")).length : 0);
	const outboxCount = async () => {
		const { sharedOutbox } = await import("../../events/outbox");
		return sharedOutbox(t.p.cfg).count();
	};
	/** The caller's files of this name. */
	const files = async (token: string, name: string) =>
		(await ok(t.as(token, "GET", `/special/files?query=${encodeURIComponent(JSON.stringify({ name }))}&pagination=${encodeURIComponent('{"limit":100}')}`), "list"))
			.items as Array<{ id: string }>;
	const record = async (who: string, k: string) => (await (await records.get()).findOne({ id: recordId(who, k) })) as IdemRecord | null;
	/** Everything an upload could leave behind, to compare before and after a request that must store nothing. */
	const footprint = async () => ({ blobs: blobCount(), events: await outboxCount() });

	test("a retry with another multipart boundary replays the answer: no second file document, blob or change event", async () => {
		const k = key();
		const name = `two-${k}`;
		const parts: Part[] = [
			{ name },
			{ filename: "a.txt", type: "text/plain", content: "first file" },
			{ name: `${name}-b` },
			{ filename: "b.bin", content: Buffer.alloc(3000, 7) },
		];
		const before = await footprint();
		const first = await upload(t, t.a.member.token, parts, k);
		expect([first.status, first.headers[REPLAYED]]).toEqual([200, undefined]);
		expect(first.body.total).toBe(2);
		expect(first.body.items.map((f: { name: string }) => f.name)).toEqual([name, `${name}-b`]);
		expect(first.body.items[1].sha256).toBe(createHash("sha256").update(Buffer.alloc(3000, 7)).digest("hex"));
		const after = await footprint();
		expect(after.blobs).toBe(before.blobs + 2);
		const rec = (await record(`u:${t.a.member.id}`, k))!;
		expect([rec.state, rec.ref?.ids]).toEqual(["done", first.body.items.map((f: { id: string }) => f.id)]);
		expect(rec.fp).not.toBe(rec.pre);
		// The same form under other boundaries, sent in one piece or chunked: the same request.
		for (const chunked of [false, true]) {
			const again = await upload(t, t.a.member.token, parts, k, { chunked });
			expect([again.status, again.headers[REPLAYED], again.body]).toEqual([200, "true", first.body]);
		}
		expect(await footprint()).toEqual(after);
		expect(await files(t.a.member.token, name)).toHaveLength(1);
		expect(await files(t.a.member.token, `${name}-b`)).toHaveLength(1);
	});

	test("the key with other content, filename, type, name, part order, query, or on a JSON route answers 422 and stores nothing", async () => {
		const k = key();
		const name = `reuse-${k}`;
		const parts: Part[] = [{ name }, { filename: "a.txt", type: "text/plain", content: "same bytes" }, { filename: "b.txt", type: "text/plain", content: "other" }];
		expect((await upload(t, t.a.member.token, parts, k)).status).toBe(200);
		const before = await footprint();
		const [named, a, b] = parts as [{ name: string }, Part & { content: string }, Part & { content: string }];
		const variants: Part[][] = [
			[named, { ...a, content: "same bytez" }, b],
			[named, { ...a, filename: "A.txt" }, b],
			[named, { ...a, type: "text/csv" }, b],
			[{ name: `${name}-x` }, a, b],
			[a, named, b],
			[named, b, a],
			[named, a],
			[named, a, b, { filename: "c.txt", content: "" }],
		];
		for (const v of variants) {
			const r = await upload(t, t.a.member.token, v, k);
			expect([r.status, r.body]).toEqual([422, { statusCode: 422, message: KEY_REUSED, error: "Unprocessable Entity" }]);
		}
		// Another query, and the key on a JSON route: 422 before the body is read.
		const queried = await upload(t, t.a.member.token, parts, k, { path: `/special/files/upload?token=${t.a.member.token}` });
		expect([queried.status, queried.body.message]).toEqual([422, KEY_REUSED]);
		const json = await t.as(t.a.member.token, "POST", "/content/notes", { title: name }, { [K]: k });
		expect([json.status, json.body]).toEqual([422, { statusCode: 422, message: KEY_REUSED, error: "Unprocessable Entity" }]);
		// A JSON request's key on an upload.
		const jk = key();
		await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: name }, { [K]: jk }), "note");
		const onUpload = await upload(t, t.a.member.token, parts, jk);
		expect([onUpload.status, onUpload.body.message]).toEqual([422, KEY_REUSED]);
		expect(await footprint()).toEqual({ ...before, events: before.events + 1 });
		expect(await files(t.a.member.token, name)).toHaveLength(1);
		// The original form still replays.
		const again = await upload(t, t.a.member.token, parts, k);
		expect([again.status, again.headers[REPLAYED]]).toEqual([200, "true"]);
	});

	test("a repeat while the first upload streams answers 409 before its body is read; afterwards it replays; one file", async () => {
		const k = key();
		const name = `running-${k}`;
		const content = Buffer.alloc(48 * 1024, 3);
		const b1 = boundaryOf("held");
		const body = form(b1, [{ name }, { filename: "held.bin", content }]);
		let release!: () => void;
		const gate = new Promise<void>((r) => (release = r));
		const blobs = blobCount();
		const repeats: Answer[] = [];
		// The first request sends half its body, then waits for the repeats (its key claimed, its record `running`).
		const first = send(
			t,
			t.a.member.token,
			b1,
			[body.subarray(0, body.length >> 1), body.subarray(body.length >> 1)],
			{ [K]: k },
			{
				between: async () => {
					try {
						await waitForValue("the first upload's claim", async () => (await record(`u:${t.a.member.id}`, k))?.state === "running");
						for (let i = 0; i < 3; i++) repeats.push(await upload(t, t.a.member.token, [{ name }, { filename: "held.bin", content }], k));
						// Another form too: 409, its body cannot be compared before the first one's is read.
						repeats.push(await upload(t, t.a.member.token, [{ name }, { filename: "other.bin", content: "x" }], k));
					} finally {
						release();
					}
				},
			},
		);
		await gate;
		for (const r of repeats) expect([r.status, r.body]).toEqual([409, { statusCode: 409, message: IN_PROGRESS, error: "Conflict" }]);
		const answered = await first;
		expect(answered.status).toBe(200);
		const after = await upload(t, t.a.member.token, [{ name }, { filename: "held.bin", content }], k);
		expect([after.status, after.headers[REPLAYED], after.body]).toEqual([200, "true", answered.body]);
		expect(await files(t.a.member.token, name)).toHaveLength(1);
		expect(blobCount()).toBe(blobs + 1);
	});

	test("concurrent uploads under one key: exactly one stores, the others answer 409 or replay it; one file, one blob", async () => {
		const k = key();
		const name = `race-${k}`;
		const parts: Part[] = [{ name }, { filename: "race.bin", content: Buffer.alloc(20_000, 9) }];
		const before = await footprint();
		const all = await Promise.all(Array.from({ length: 10 }, () => upload(t, t.a.member.token, parts, k)));
		const ran = all.filter((r) => r.status === 200 && r.headers[REPLAYED] === undefined);
		expect(ran).toHaveLength(1);
		for (const r of all) {
			if (r.status === 409) expect(r.body).toEqual({ statusCode: 409, message: IN_PROGRESS, error: "Conflict" });
			else expect([r.status, r.body]).toEqual([200, ran[0].body]);
		}
		expect(await files(t.a.member.token, name)).toHaveLength(1);
		expect(await footprint()).toEqual({ blobs: before.blobs + 1, events: before.events + 1 });
	});

	test("keys belong to the principal: the same key and form of two users of a tenant and of the other tenant are three uploads", async () => {
		const k = key();
		const name = `principal-${k}`;
		const parts: Part[] = [{ name }, { filename: "p.txt", content: "shared content" }];
		const blobs = blobCount();
		const tokens = [t.a.member.token, t.a.admin.token, t.b.member.token];
		const answers = await Promise.all(tokens.map((tok) => upload(t, tok, parts, k)));
		for (const r of answers) expect([r.status, r.headers[REPLAYED]]).toEqual([200, undefined]);
		const ids = answers.map((r) => r.body.items[0].id);
		expect(new Set(ids).size).toBe(3);
		expect(blobCount()).toBe(blobs + 3);
		// Tenant b's member replays its own file, never tenant a's; a's file does not exist for b.
		const replay = await upload(t, t.b.member.token, parts, k);
		expect([replay.status, replay.headers[REPLAYED], replay.body.items[0].id]).toEqual([200, "true", ids[2]]);
		expect((await t.as(t.b.member.token, "GET", `/special/files/${ids[0]}`)).status).toBe(404);
		expect(await files(t.b.member.token, name)).toHaveLength(1);
		expect(blobCount()).toBe(blobs + 3);
	});

	test("an attempt that lost its key to a retry writes no file document and leaves no blob (409)", async () => {
		const k = key();
		const name = `stale-${k}`;
		const id = recordId(`u:${t.a.member.id}`, k);
		const s = await records.get();
		await s.insert({ id, fp: "x", pre: "x", action: "special.files.upload", state: "running", attempt: "new-attempt", lease: Date.now() + 60_000, at: Date.now() });
		const before = await footprint();
		const claims = JSON.parse(Buffer.from(t.a.member.token.split(".")[1], "base64url").toString("utf8"));
		const call = t.p.broker.call("special.files.upload", Readable.from([Buffer.from("late content")]), {
			meta: { token: claims, file: { name }, idempotency: { id, attempt: "old-attempt", col: "special/files" } },
		});
		await expect(call).rejects.toMatchObject({ code: 409, message: IN_PROGRESS });
		expect(await footprint()).toEqual(before);
		expect(await files(t.a.member.token, name)).toHaveLength(0);
		expect(((await s.findOne({ id })) as IdemRecord).state).toBe("running");
	});

	test("a huge body stays bounded: over FILE_MAX_BYTES 413 (the key given back, a repeat stores nothing), over the form's length 413 before any claim", async () => {
		const k = key();
		const name = `huge-${k}`;
		const big = Buffer.alloc(MAX + 1, 1);
		const before = await footprint();
		const TOO_LARGE = { statusCode: 413, message: `file is larger than ${MAX} bytes`, error: "Payload Too Large" };
		// A first request over the limit stored nothing: its key is free again (the body it sent was never compared).
		const over = await upload(t, t.a.member.token, [{ name }, { filename: "big.bin", content: big }], k);
		expect([over.status, over.body]).toEqual([413, TOO_LARGE]);
		expect(await record(`u:${t.a.member.id}`, k)).toBeNull();
		const small = await upload(t, t.a.member.token, [{ name }, { filename: "small.bin", content: "small" }], k);
		expect([small.status, small.headers[REPLAYED]]).toEqual([200, undefined]);
		const stored = await footprint();
		expect(stored.blobs).toBe(before.blobs + 1);
		// A repeat whose file is over the limit (with a Content-Length, or chunked): 413, nothing stored, the key kept.
		for (const chunked of [false, true]) {
			const r = await upload(t, t.a.member.token, [{ name }, { filename: "small.bin", content: big }], k, { chunked });
			expect([r.status, r.body]).toEqual([413, TOO_LARGE]);
		}
		expect(await footprint()).toEqual(stored);
		// A body whose Content-Length is over what ten files can take: 413 before the key is looked at.
		const hk = key();
		const b = boundaryOf("len");
		const head = form(b, [{ filename: "x.bin", content: "" }]);
		const r = await new Promise<Answer>((resolve, reject) => {
			const req = postMultipart(`${t.p.url}/special/files/upload`, t.a.member.token, b, { "content-length": String(10 * (MAX + 64 * 1024) + 1), [K]: hk }, (res) =>
				answerOf(res).then((a) => {
					req.destroy();
					resolve(a);
				}, reject),
			);
			req.on("error", reject);
			req.write(head);
		});
		expect([r.status, r.body]).toEqual([413, TOO_LARGE]);
		expect(await record(`u:${t.a.member.id}`, hk)).toBeNull();
		const again = await upload(t, t.a.member.token, [{ name }, { filename: "small.bin", content: "small" }], k);
		expect([again.status, again.headers[REPLAYED], again.body]).toEqual([200, "true", small.body]);
	});

	test("a form read to its end and refused (400) keeps its answer like any 4xx; a fixed form under the key is another request", async () => {
		const k = key();
		const bad: Part[] = [
			{ filename: "a.txt", content: "a" },
			{ field: "attachment", filename: "b.txt", content: "b" },
		];
		const MSG = { statusCode: 400, message: "attachment is not allowed: file parts are named file", error: "Bad Request" };
		const first = await upload(t, t.a.member.token, bad, k);
		expect([first.status, first.body]).toEqual([400, MSG]);
		const again = await upload(t, t.a.member.token, bad, k);
		expect([again.status, again.headers[REPLAYED], again.body]).toEqual([400, "true", MSG]);
		const fixed = await upload(t, t.a.member.token, [bad[0]], k);
		expect([fixed.status, fixed.body.message]).toEqual([422, KEY_REUSED]);
		// Keys that are not 1-255 printable ASCII: 400 before the body is read.
		const odd = await upload(t, t.a.member.token, [bad[0]], "tab\there");
		expect([odd.status, odd.body]).toEqual([400, { statusCode: 400, message: "Idempotency-Key must be 1 to 255 printable ASCII characters", error: "Bad Request" }]);
	});

	test("an upload committed whose answer was lost (its node died) replays its files re-read as { items, total }", async () => {
		const k = key();
		const name = `lost-${k}`;
		const parts: Part[] = [{ name }, { filename: "1.txt", content: "one" }, { name: `${name}-2` }, { filename: "2.txt", content: "two" }];
		const { status, body: first } = await upload(t, t.a.member.token, parts, k);
		expect(status).toBe(200);
		const s = await records.get();
		const id = recordId(`u:${t.a.member.id}`, k);
		await s.updateIf({ id }, { $set: { state: "committed", lease: 0 }, $unset: { body: true, status: true, headers: true } });
		const before = await footprint();
		const again = await upload(t, t.a.member.token, parts, k);
		expect([again.status, again.headers[REPLAYED]]).toEqual([200, "true"]);
		expect(again.body.total).toBe(2);
		expect(again.body.items.map((f: { id: string }) => f.id).sort()).toEqual(first.items.map((f: { id: string }) => f.id).sort());
		expect(await footprint()).toEqual(before);
		expect(((await s.findOne({ id })) as IdemRecord).state).toBe("done");
	});
});

test("the OpenAPI document declares Idempotency-Key and its 400, 409 and 422 answers on the upload", () => {
	const doc = openApiDocument() as { paths: Record<string, Record<string, { parameters?: Array<{ $ref?: string }>; responses: Record<string, { $ref?: string }> }>> };
	const up = doc.paths["/special/files/upload"].post;
	expect(up.parameters?.map((p) => p.$ref)).toContain("#/components/parameters/idempotencyKey");
	expect([up.responses["400"]?.$ref, up.responses["409"]?.$ref, up.responses["422"]?.$ref]).toEqual([
		"#/components/responses/BadRequest",
		"#/components/responses/Conflict",
		"#/components/responses/UnprocessableEntity",
	]);
});
