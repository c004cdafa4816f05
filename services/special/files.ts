/**
 * special/files (docs/contracts.md "Files", docs/files.md): content in the blob store (stores/blobs), metadata in the
 * document store. The upload and share specials run after the authority layer; `files.download` (internal, the
 * gateway's public download route calls it) decides access itself and answers 404 for everything it refuses;
 * `files.orphans` (internal, the cleaner) removes blobs no record holds; destroy and purge remove content.
 *
 * Multi-node: the gateway streams each multipart file part to `special.files.upload` as a Moleculer stream param
 * (works across the transporter), and `special.files.download` answers a stream. So only the special domain's
 * nodes touch the blob store: with local files, the special domain runs on one node (or its nodes share DATA_DIR/files);
 * with S3, on any number.
 */
import { createReadStream, createWriteStream, promises as fs } from "fs";
import path from "path";
import { createHash, randomBytes } from "crypto";
import { Readable, Transform } from "stream";
import { pipeline } from "stream/promises";
import type { Context } from "moleculer";
import { special } from "../../catalog/domains/special";
import { userTokenSubjects, type SubjectSource } from "../../lib/grant-validation";
import { grantCache } from "../../authority/grant-cache";
import { matches } from "../../lib/query";
import { configOf, type PlatformConfig } from "../../runtime/config";
import { objectId } from "../../lib/crypto";
import { ApiError, badRequest, notFound } from "../../lib/errors";
import {
	contentDisposition,
	contentType,
	downloadPath,
	hashShareKey,
	MAX_SHARE_KEYS,
	parseRange,
	SHARE_TTL_DEFAULT,
	SHARE_TTL_MAX,
	SNIFF_BYTES,
	sniffMimetype,
} from "../../lib/files";
import { requirePlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { identityOf, type RequestMeta } from "../../lib/types";
import { isPlainObject } from "../../lib/validate";
import { createBlobStore, LocalBlobStore, type BlobStore } from "../../stores/blobs";
import { fenceChanges, IdempotencyStoreRef, markShownOnce } from "../../engine/idempotency-record";
import { platformDoc, type CollectionHooks, type Ctx, type EngineService } from "../../engine/collection.mixin";
import { asSchema } from "../../lib/service";
import type { StoredDoc } from "../../stores";
import { callerView } from "../../authority/authority";

const FILES = special.collections.find((c) => c.name === "files")!;
const OBJECT_ID = /^[0-9a-f]{24}$/i;

/** What the gateway passes beside each file part's stream (ctx.meta.file). */
export interface UploadPart {
	name?: string;
	/** The part's declared Content-Type (a hint for text content only). */
	declared?: string;
}

/** Params of the internal download action. */
export interface DownloadParams {
	id: string;
	key?: string;
	range?: string;
	ifNoneMatch?: string;
}

/** What the download action leaves in ctx.meta.$download for the gateway to send. */
export interface DownloadHead {
	status: 200 | 206 | 304 | 416;
	headers: Record<string, string>;
}

/** The special service's `this` as file content sees it (lib/service.ts): the engine's methods and the blob store's state. */
type Svc = EngineService & {
	blobs: BlobStore;
	spoolDir: string;
	cfg: PlatformConfig;
	idempotency: IdempotencyStoreRef;
};

/** The service an action of the special domain runs on. */
const svcOf = (ctx: { service: unknown }) => ctx.service as Svc;

function byOf(ctx: Ctx) {
	const t = ctx.meta.token!;
	return { owner: identityOf(t), cid: t.cid, aid: t.aid, coworkers: t.coworker ? t.coworker.split(" ").filter(Boolean) : [] };
}

function nameOf(part: UploadPart | undefined): string {
	const raw = typeof part?.name === "string" ? part.name.replace(/[\u0000-\u001f\u007f]/g, "").trim() : "";
	if (raw.length > 500) throw badRequest("name must be at most 500 characters");
	return raw || "file";
}

/**
 * Streams one part to a spool file while counting, hashing and keeping the first bytes; more than `max` bytes
 * stops it with 413. Then into the blob store under a fresh id, and only then the record: a crash in between leaves
 * a blob without a record (collected by the cleaner after FILE_ORPHAN_GRACE_MINUTES), never a record without content.
 * A keyed upload's record is fenced first (engine/idempotency-record.ts: on PostgreSQL in the record's transaction):
 * an attempt a retry took the key from writes no record, and its blob is removed at once.
 */
async function upload(ctx: Ctx): Promise<unknown> {
	const svc = svcOf(ctx);
	const plan = requirePlan(ctx.locals);
	const input = ctx.params as unknown as Readable;
	if (!input || typeof (input as Readable).pipe !== "function") throw badRequest("file content is required");
	const part = (ctx.meta as RequestMeta & { file?: UploadPart }).file;
	const name = nameOf(part);
	const max = svc.cfg.fileMaxBytes;
	const id = objectId();
	const hash = createHash("sha256");
	const head: Buffer[] = [];
	let headLen = 0;
	let size = 0;
	const meter = new Transform({
		transform(chunk: Buffer, _enc, cb) {
			size += chunk.length;
			if (size > max) return cb(new ApiError(413, `file is larger than ${max} bytes`));
			hash.update(chunk);
			if (headLen < SNIFF_BYTES) {
				head.push(chunk.subarray(0, SNIFF_BYTES - headLen));
				headLen += Math.min(chunk.length, SNIFF_BYTES - headLen);
			}
			cb(null, chunk);
		},
	});
	await fs.mkdir(svc.spoolDir, { recursive: true, mode: 0o700 });
	const spool = path.join(svc.spoolDir, `${id}.${randomBytes(4).toString("hex")}`);
	try {
		try {
			await pipeline(input, meter, createWriteStream(spool, { mode: 0o600 }));
		} catch (err) {
			if (err instanceof ApiError) throw err;
			throw badRequest("the upload was interrupted");
		}
		// Local files: the spool file becomes the blob (same file system); elsewhere it is streamed with its length.
		if (svc.blobs instanceof LocalBlobStore) await svc.blobs.adopt(id, spool);
		else await svc.blobs.put(id, createReadStream(spool), size);
	} finally {
		await fs.rm(spool, { force: true });
	}
	const doc: StoredDoc = platformDoc(
		{ name, mimetype: sniffMimetype(Buffer.concat(head), part?.declared), size, sha256: hash.digest("hex"), storage: id, share_keys: [] },
		byOf(ctx),
	);
	doc.id = id;
	try {
		await fenceChanges(ctx, svc.idempotency, "special/files", [id]);
		await svc.collectionStore("files").insert(doc);
	} catch (err) {
		await svc.blobs.remove(id).catch(() => undefined);
		throw err;
	}
	await svc.recordChanges(ctx, "files", [{ op: "c", before: null, after: doc }]);
	return present(FILES, doc, plan.fields);
}

/** `{ ttl? }` → a new share key; `{ type: "UNLINK" }` → every share key of the file revoked. */
async function share(ctx: Ctx): Promise<unknown> {
	const svc = svcOf(ctx);
	const plan = requirePlan(ctx.locals);
	const body = ctx.params.body ?? {};
	if (!isPlainObject(body)) throw badRequest("body must be an object");
	const extra = Object.keys(body).find((k) => k !== "ttl" && k !== "type");
	if (extra !== undefined) throw badRequest(`${extra} is not allowed`);
	const store = svc.collectionStore("files");
	const before: StoredDoc | null = await store.findOne({ $and: [plan.filter, { deleted_at: null }] });
	if (body.type !== undefined) {
		if (body.type !== "UNLINK") throw badRequest("type must be UNLINK");
		if (body.ttl !== undefined) throw badRequest("ttl is not allowed with type UNLINK");
	} else if (body.ttl !== undefined && (!Number.isInteger(body.ttl) || (body.ttl as number) < 1 || (body.ttl as number) > SHARE_TTL_MAX))
		throw badRequest(`ttl must be an integer from 1 to ${SHARE_TTL_MAX}`);
	if (!before) throw notFound();
	const now = new Date();
	const stamp = { updated_at: now.toISOString(), updated_by: identityOf(plan.token), updated_in: plan.token.aid ?? plan.token.cid, timestamp: String(Date.now()) };
	const keys = (Array.isArray(before.share_keys) ? (before.share_keys as Array<{ hash: string; expires_at: string }>) : []).filter((k) => Date.parse(k.expires_at) > now.getTime());
	if (body.type === "UNLINK") {
		const after = await store.setOne(before.id, { share_keys: [], ...stamp });
		if (after) await svc.recordChanges(ctx, "files", [{ op: "u", before, after }]);
		return { data: { revoked: keys.length } };
	}
	const key = randomBytes(24).toString("base64url");
	const expires_at = new Date(now.getTime() + ((body.ttl as number | undefined) ?? SHARE_TTL_DEFAULT) * 1000).toISOString();
	const after = await store.setOne(before.id, { share_keys: [...keys, { hash: hashShareKey(key), expires_at }].slice(-MAX_SHARE_KEYS), ...stamp });
	if (!after) throw notFound();
	await svc.recordChanges(ctx, "files", [{ op: "u", before, after }]);
	markShownOnce(ctx);
	return { data: { path: downloadPath(before.id, key), key, expires_at } };
}

/**
 * Destroy (and the cleaner's purge, and a saga undoing an upload's record) removes the content once the record is
 * gone for good; a soft delete keeps it. A destroy inside a saga leaves the content to the orphan collector, so an
 * aborted saga that brings the record back finds its content.
 */
async function afterWrite(ctx: Ctx, op: string, before: StoredDoc | null, after: StoredDoc | null): Promise<void> {
	if (op !== "d" || after || !before || typeof before.storage !== "string") return;
	if (ctx.meta?.headers?.["x-saga-session"]) return;
	const svc = svcOf(ctx);
	if (await svc.collectionStore("files").findOne({ id: before.id })) return;
	await svc.blobs.remove(before.storage).catch((err: unknown) => svc.logger.warn(`file content ${before.id} not removed: ${(err as Error).message}`));
}

export const filesHooks: CollectionHooks = { afterWrite, specials: { upload, share } };

/** The internal actions and the blob store's lifecycle, mixed into the special service. */
export const filesMixin = asSchema<Svc>({
	actions: {
		/**
		 * The gateway's public download: a share key of the file (live, not revoked), or a bearer whose `download` (or
		 * `read`) view holds it; anything else 404. Leaves status and headers in ctx.meta.$download and answers the
		 * content stream (null for 304 and 416).
		 */
		"files.download": {
			visibility: "public",
			async handler(this: Svc, ctx: Context<DownloadParams, RequestMeta & { $download?: DownloadHead }>): Promise<Readable | null> {
				const { id, key, range, ifNoneMatch } = ctx.params;
				if (typeof id !== "string" || !OBJECT_ID.test(id)) throw notFound();
				const store = this.collectionStore("files");
				let doc: StoredDoc | null = null;
				if (typeof key === "string" && key) {
					const d: StoredDoc | null = await store.findOne({ id: id.toLowerCase(), deleted_at: null });
					const h = hashShareKey(key);
					const now = Date.now();
					if (d && Array.isArray(d.share_keys) && (d.share_keys as Array<{ hash: string; expires_at: string }>).some((k) => k.hash === h && Date.parse(k.expires_at) > now))
						doc = d;
				}
				// A bearer's view: the special action `download` (its scope and grant), or `read` of the record (spec: upload,
				// download and share are special actions of special:files; reading a record lets its reader download it).
				for (const action of ["download", "read"]) {
					if (doc || !ctx.meta.token) break;
					try {
						const plan = await callerView(ctx as unknown as Ctx, "special", "files", action, id);
						doc = await store.findOne({ $and: [plan.filter, { deleted_at: null }] });
					} catch (err) {
						// No scope, no grant, not an access token: the file does not exist for this caller.
						if (!(err instanceof ApiError) || err.code >= 500) throw err;
					}
				}
				if (!doc || typeof doc.storage !== "string") throw notFound();
				const size = Number(doc.size ?? 0);
				const etag = `"${String(doc.sha256 ?? "")}"`;
				const headers: Record<string, string> = {
					"Content-Type": contentType(String(doc.mimetype ?? "application/octet-stream")),
					"Content-Disposition": contentDisposition(String(doc.name ?? "file"), String(doc.mimetype ?? "")),
					ETag: etag,
					"Accept-Ranges": "bytes",
					"X-Content-Type-Options": "nosniff",
					"Content-Security-Policy": "default-src 'none'; sandbox",
					"Referrer-Policy": "no-referrer",
					"Cache-Control": "private, no-cache",
				};
				if (typeof ifNoneMatch === "string" && ifNoneMatch.split(",").some((t) => t.trim().replace(/^W\//, "") === etag)) {
					ctx.meta.$download = { status: 304, headers: { ETag: etag, "Cache-Control": headers["Cache-Control"] } };
					return null;
				}
				const r = parseRange(range, size);
				if (r.kind === "unsatisfiable") {
					ctx.meta.$download = { status: 416, headers: { "Content-Range": `bytes */${size}` } };
					return null;
				}
				const stream = await this.blobs.get(doc.storage, r.kind === "partial" ? { start: r.start, end: r.end } : undefined);
				if (!stream) throw notFound();
				if (r.kind === "partial") {
					headers["Content-Range"] = `bytes ${r.start}-${r.end}/${size}`;
					headers["Content-Length"] = String(r.end - r.start + 1);
				} else headers["Content-Length"] = String(size);
				ctx.meta.$download = { status: r.kind === "partial" ? 206 : 200, headers };
				return stream;
			},
		},
		/**
		 * Email attachments (the publisher): the files `ids` as `{ id, name, mimetype, size }`, each readable by the
		 * email's owner in its tenant (a live file of the tenant that the owner owns or is shared with); 404
		 * `attachment <id> is not available` otherwise.
		 */
		"files.attachments": {
			visibility: "public",
			async handler(this: Svc, ctx: Context<AttachmentParams>) {
				const out = [];
				for (const id of ctx.params.ids ?? []) {
					const d = await attachable(this, id, ctx.params);
					out.push({ id: d.id, name: String(d.name ?? "file"), mimetype: String(d.mimetype ?? "application/octet-stream"), size: Number(d.size ?? 0) });
				}
				return out;
			},
		},
		/** The content of one attachment (same check as `files.attachments`), as a stream. */
		"files.content": {
			visibility: "public",
			async handler(this: Svc, ctx: Context<AttachmentParams & { id: string }>): Promise<Readable> {
				const d = await attachable(this, ctx.params.id, ctx.params);
				const stream = await this.blobs.get(String(d.storage));
				if (!stream) throw notFound(`attachment ${ctx.params.id} is not available`);
				return stream;
			},
		},
		/**
		 * The cleaner's orphan pass: blobs older than the grace period that no file record holds (an upload that died
		 * between its blob and its record, a destroy inside a committed saga), and partial writes left by a crash.
		 */
		"files.orphans": {
			visibility: "public",
			async handler(this: Svc, ctx: Context<{ graceMs?: number }>): Promise<{ removed: number; partial: number }> {
				const grace = Number.isFinite(ctx.params.graceMs) && ctx.params.graceMs! >= 0 ? ctx.params.graceMs! : this.cfg.fileOrphanGraceMinutes * 60_000;
				const store = this.collectionStore("files");
				const cutoff = Date.now() - grace;
				let removed = 0;
				for await (const b of this.blobs.list()) {
					if (b.modified > cutoff) continue;
					if (await store.findOne({ id: b.key })) continue;
					await this.blobs.remove(b.key);
					removed++;
				}
				let partial = 0;
				if (this.blobs instanceof LocalBlobStore) partial += await this.blobs.sweepPartial(grace);
				partial += await sweepDir(this.spoolDir, grace);
				return { removed, partial };
			},
		},
	},
	created(this: Svc) {
		this.cfg = configOf(this.broker);
		this.blobs = createBlobStore(this.cfg);
		this.spoolDir = path.join(this.cfg.dataDir, "files", ".incoming");
		this.idempotency = new IdempotencyStoreRef(this.cfg);
	},
	async stopped(this: Svc) {
		await this.blobs?.close();
		await this.idempotency?.release();
	},
});

/** Who wants a file attached: the email's owner (identity) and its clients (the first is its tenant). */
export interface AttachmentParams {
	ids?: string[];
	owner: string;
	clients: string[];
}

async function attachable(svc: Svc, id: unknown, who: AttachmentParams): Promise<StoredDoc> {
	const missing = notFound(`attachment ${String(id).slice(0, 40)} is not available`);
	if (typeof id !== "string" || !OBJECT_ID.test(id) || typeof who.owner !== "string" || !Array.isArray(who.clients) || !who.clients[0]) throw missing;
	const d: StoredDoc | null = await svc.collectionStore("files").findOne({ id: id.toLowerCase(), deleted_at: null });
	if (!d || typeof d.storage !== "string") throw missing;
	const tenant = who.clients[0];
	const inTenant = Array.isArray(d.clients) && (d.clients as string[]).includes(tenant);
	const mine = d.owner === who.owner || (Array.isArray(d.shares) && (d.shares as string[]).includes(who.owner));
	if (!inTenant || !mine || !(await ownerReadsWhole(svc, who.owner, tenant, d))) throw missing;
	return d;
}

/**
 * Whether the email's owner may read the file whole now (the delivery decision, with the owner's grants and subjects
 * of the moment): a read grant on special:files whose row filter admits the file and that hides no field. A message
 * carries the file's whole content, so a grant narrowed to some fields, like one deleted, no longer lets it leave.
 */
async function ownerReadsWhole(svc: Svc, owner: string, tenant: string, file: StoredDoc): Promise<boolean> {
	const client = (await svc.broker.call("domain.clients.authenticate", { id: tenant })) as { domains?: string[] } | null;
	const domain = client?.domains?.[0];
	if (!domain) return false;
	// A user's subjects as its token would hold them now; an owner that is no user (the client, or an app of it: a
	// token's identity is its uid, else its aid, else its cid) holds the client's and its own, as its token does.
	const user = owner === tenant ? null : ((await svc.broker.call("identity.users.byId", { id: owner })) as (SubjectSource & { status?: string }) | null);
	if (user?.status === "INACTIVE") return false;
	const subjects = user ? userTokenSubjects(user, domain).subjects : [...new Set([`${tenant}@${domain}`, `${owner}@${domain}`])];
	const d = (await grantCache.get(svc.broker)).decide({ subjects, action: "read", object: "special:files" });
	return d.granted && d.fields === null && (d.rowFilter === null || matches({ ...file }, d.rowFilter));
}

/** Removes files of `dir` older than `olderThanMs` (spool files of uploads a crash cut short). */
async function sweepDir(dir: string, olderThanMs: number): Promise<number> {
	let names: string[];
	try {
		names = await fs.readdir(dir);
	} catch {
		return 0;
	}
	let n = 0;
	for (const name of names) {
		const f = path.join(dir, name);
		const st = await fs.stat(f).catch(() => null);
		if (st?.isFile() && Date.now() - st.mtimeMs >= olderThanMs) {
			await fs.rm(f, { force: true });
			n++;
		}
	}
	return n;
}
