/**
 * The send operations of touch (docs/contracts.md "Communications (touch)"), as plain functions the special-action routing
 * calls after the authority layer (`send:touch:<collection>`). Each validates its body, records the message through
 * the collection engine's write path (one change event per record) and answers at once: delivery happens later, from
 * the change stream, in the publisher's delivery engine (workers/publisher/delivery.ts).
 *
 * `ctx` is the action context of the touch service: `ctx.service` the touch service instance, `ctx.locals.plan` the
 * access plan the authority middleware attached (its `token`, its `filter` = the caller's view of the collection, its
 * `fields`), or, without a plan, `ctx.meta.token` (then the caller's view of pushes is its own subscriptions).
 */
import type { Context } from "moleculer";
import { findCollection } from "../../catalog";
import { objectId } from "../../lib/crypto";
import { ApiError, badRequest, conflict, forbidden, notFound } from "../../lib/errors";
import type { AccessPlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { assertSender, fillTemplate } from "../../lib/touch";
import { identityOf, type Doc, type TokenClaims } from "../../lib/types";
import { isPlainObject, validateBody, validateValue } from "../../lib/validate";
import { loadVapid } from "../../runtime/vapid";
import { configOf } from "../../runtime/config";
import { assertShares, platformDoc, type Ctx, type EngineService } from "../../engine/collection.mixin";
import { matches } from "../../lib/query";
import { isDuplicateKeyError, type StoredDoc } from "../../stores";
import { assertInView } from "../caller-view";

/** What every send needs from its context (a Moleculer Context of the touch service, or the same shape). */
export type SendCtx = Pick<Context, "call"> & {
	service: unknown;
	meta: { token?: TokenClaims };
	locals?: Record<string, unknown>;
};

const col = (name: string) => findCollection("touch", name)!.collection;

/** The service an action of the touch domain runs on: the collection engine's (engine/collection.mixin.ts). */
const engineOf = (ctx: { service: unknown }) => ctx.service as EngineService;

/** Largest JSON of a push message: RFC 8291 records carry at most 4,096 bytes, less the encryption overhead. */
export const MAX_PUSH_BYTES = 3000;

function callerOf(ctx: SendCtx): { token: TokenClaims; plan?: AccessPlan } {
	const plan = ctx.locals?.plan as AccessPlan | undefined;
	const token = plan?.token ?? ctx.meta?.token;
	if (!token) throw new ApiError(502, "authorization layers were not applied");
	return { token, plan };
}

function stampsOf(token: TokenClaims) {
	return { owner: identityOf(token), cid: token.cid, aid: token.aid, coworkers: token.coworker ? token.coworker.split(" ").filter(Boolean) : [] };
}

/** The delivery fields of a new email or SMS: queued, due at `date` (a future one schedules it) or now. */
export function queuedFields(date?: unknown): Record<string, unknown> {
	const now = new Date().toISOString();
	const at = typeof date === "string" && date > now ? date : now;
	return { state: "QUEUED", attempts: 0, next_at: at };
}

/**
 * An email's `from` must be at a domain of its tenant (`tenant`: the client id first in its `clients`) or a sender
 * TOUCH_EMAIL_SENDERS allows (400 otherwise, lib/touch.ts assertSender). Every path that writes `from` checks it:
 * send, create, bulk create, patch and bulk patch.
 */
export async function checkSender(ctx: Pick<Context, "call"> & { service: unknown }, tenant: unknown, from: unknown): Promise<void> {
	if (from === undefined) return;
	const client = typeof tenant === "string" ? ((await ctx.call("domain.clients.authenticate", { id: tenant })) as { domains?: string[] } | null) : null;
	assertSender(from, client?.domains ?? [], configOf(engineOf(ctx).broker).touchEmailSenders);
}

/**
 * Every file an email's `attachments` names is one the caller can GET on special/files (404 `file <id> not found`
 * otherwise, nothing queued): send, create, bulk create, patch and bulk patch. The publisher checks again at delivery
 * (docs/files.md, "Email attachments").
 */
export async function checkAttachments(ctx: Pick<Context, "call">, attachments: unknown): Promise<void> {
	if (!Array.isArray(attachments)) return;
	for (const id of new Set(attachments.map(String))) await assertInView(ctx, "special.files", id, "file");
}

async function insertRecords(ctx: SendCtx, collection: string, docs: StoredDoc[]): Promise<void> {
	const store = engineOf(ctx).collectionStore(collection);
	try {
		if (docs.length === 1) await store.insert(docs[0]);
		else await store.insertMany(docs);
	} catch (err) {
		if (isDuplicateKeyError(err)) throw conflict("ref already exists");
		throw err;
	}
	await engineOf(ctx).recordChanges(
		ctx as Ctx,
		collection,
		docs.map((after) => ({ op: "c" as const, before: null, after })),
	);
}

async function createQueued(ctx: SendCtx, collection: "emails" | "smss", body: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<{ data: Doc }> {
	const { token, plan } = callerOf(ctx);
	const c = col(collection);
	const clean = validateBody(c, body, "create");
	const doc = platformDoc({ ...clean, ...extra, ...queuedFields(clean.date) }, stampsOf(token));
	if (collection === "emails") {
		await checkSender(ctx, token.cid, doc.from);
		await checkAttachments(ctx, doc.attachments);
	}
	// The same rules as a create: the record stays inside the caller's view (grant row filter), shares stay in the tenant.
	if (plan && !matches(doc, plan.filter)) throw forbidden("document is outside the grant filter");
	await assertShares(ctx as unknown as Ctx, token, [doc.shares]);
	await insertRecords(ctx, collection, [doc]);
	return { data: present(c, doc, plan?.fields ?? null) };
}

/** `POST /touch/emails/send` `{ ...email fields }` → `{ data: email }` (state QUEUED; `provider` defaults to nodemailer). */
export function sendEmail(ctx: SendCtx, body: unknown): Promise<{ data: Doc }> {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	return createQueued(ctx, "emails", { provider: "nodemailer", ...body });
}

/** `POST /touch/smss/send` `{ provider, receptors, message, sender? }` → `{ data: sms }` (state QUEUED). */
export function sendSms(ctx: SendCtx, body: unknown): Promise<{ data: Doc }> {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	return createQueued(ctx, "smss", body);
}

/**
 * `POST /touch/smss/send/template` `{ provider, receptors, template, params, sender? }` → `{ data: sms }`: the caller's
 * tenant's `SMS_TEMPLATE` config entry named `template`, its `{{param}}` slots filled from `params`, sent as the message.
 */
export async function sendSmsTemplate(ctx: SendCtx, body: unknown): Promise<{ data: Doc }> {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const { template, params, ...rest } = body;
	for (const k of Object.keys(rest))
		if (!["provider", "receptors", "sender"].includes(k)) throw badRequest(`${k} is not allowed in a template SMS (provider, receptors, template, params, sender)`);
	if (typeof template !== "string" || !template || template.length > 200) throw badRequest("template must be the name of an SMS_TEMPLATE config entry");
	if (params !== undefined && !isPlainObject(params)) throw badRequest("params must be an object");
	const { token } = callerOf(ctx);
	const entries = (await ctx.call("context.configs.touch", { eid: token.cid })) as Array<{ key: string; value: unknown }>;
	const entry = entries.find(
		(e): e is { key: string; value: { name: string; text: string } } =>
			e.key === "SMS_TEMPLATE" && isPlainObject(e.value) && e.value.name === template && typeof e.value.text === "string",
	);
	if (!entry) throw notFound(`SMS template ${template} is not defined`);
	const message = fillTemplate(entry.value.text, (params as Record<string, unknown>) ?? {});
	return createQueued(ctx, "smss", { ...rest, message }, { template });
}

/**
 * `POST /touch/pushes/send` `{ push?, session?, title, body, url?, data? }` → `{ data: { items: <push-histories>, total } }`:
 * one queued push-histories record per target subscription (the named one, or every one of the session) in the
 * caller's view. A named subscription outside the view answers 404 `push <id> not found`, a session the caller cannot
 * GET on identity/sessions 404 `session <id> not found`.
 */
export async function sendPush(ctx: SendCtx, body: unknown): Promise<{ data: { items: Doc[]; total: number } }> {
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	for (const k of Object.keys(body))
		if (!["push", "session", "title", "body", "url", "data"].includes(k)) throw badRequest(`${k} is not allowed in a push (push, session, title, body, url, data)`);
	const { push, session, title, body: text, url, data } = body;
	if (push === undefined && session === undefined) throw badRequest("push or session is required");
	if (push !== undefined) validateValue("push", { type: "string", format: "objectId" }, push);
	if (session !== undefined) validateValue("session", { type: "string", format: "objectId" }, session);
	if (typeof title !== "string" || !title) throw badRequest("title is required");
	validateValue("title", { type: "string", maxLength: 1000 }, title);
	if (typeof text !== "string") throw badRequest("body is required");
	validateValue("body", { type: "string", maxLength: 3000 }, text);
	if (url !== undefined) validateValue("url", { type: "string", format: "uri", maxLength: 2000 }, url);
	if (data !== undefined) validateValue("data", { type: "object" }, data);
	const message: Record<string, unknown> = { title, body: text, ...(url !== undefined ? { url } : {}), ...(data !== undefined ? { data } : {}) };
	if (Buffer.byteLength(JSON.stringify(message)) > MAX_PUSH_BYTES) throw badRequest(`the push message is too large (at most ${MAX_PUSH_BYTES} bytes of JSON)`);

	const { token, plan } = callerOf(ctx);
	// A session is one the caller can GET on identity/sessions, as for a foreign id otherwise.
	if (session !== undefined) await assertInView(ctx, "identity.sessions", session as string, "session");
	const view = plan?.filter ?? { owner: identityOf(token), deleted_at: null };
	const target = push !== undefined ? { id: push, ...(session !== undefined ? { session } : {}) } : { session };
	const subs = await engineOf(ctx)
		.collectionStore("pushes")
		.find({ query: { $and: [view, { deleted_at: null }, target] }, sort: { id: 1 }, limit: 1000 });
	if (push !== undefined && !subs.length) throw notFound(`push ${push} not found`);
	const now = new Date().toISOString();
	const docs = subs.map((s) => platformDoc({ id: objectId(), to: s.id, session: s.session, message, status: "QUEUED", attempt: 1, next_at: now }, stampsOf(token)));
	if (docs.length) await insertRecords(ctx, "push-histories", docs);
	const histories = col("push-histories");
	return { data: { items: docs.map((d) => present(histories, d)), total: docs.length } };
}

/** `GET /touch/pushes/vapid` (read:touch:pushes) → `{ data: { public_key } }`: the applicationServerKey for subscriptions. */
export function vapidPublicKey(ctx: Pick<SendCtx, "service">): { data: { public_key: string } } {
	return { data: { public_key: loadVapid(configOf(engineOf(ctx).broker)).publicKey } };
}
