/**
 * conjoint/accounts `generate` (docs/contracts.md "Other special actions"): the caller's messaging account, one per
 * identity (user, else app, else client). The account's id follows from the identity, so two concurrent first calls
 * (on any number of nodes) insert the same id and the second is a duplicate-key no-op that answers the first's
 * document: there is never a second account.
 */
import { conjoint } from "../../catalog/domains/conjoint";
import { sha256Hex } from "../../lib/crypto";
import { badRequest, conflict, forbidden, notFound } from "../../lib/errors";
import { requirePlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { identityOf } from "../../lib/types";
import { isPlainObject } from "../../lib/validate";
import { and } from "../../authority/authority";
import { platformDoc, type Ctx, type EngineService } from "../../engine/collection.mixin";
import { isDuplicateKeyError, type StoredDoc } from "../../stores";
import { matches } from "../../lib/query";
import { flushUnit } from "../../stores/unit";

const ACCOUNTS = conjoint.collections.find((c) => c.name === "accounts")!;
type Svc = EngineService;

/** The id of the account of one identity. */
export function accountIdOf(identity: string): string {
	return sha256Hex(`conjoint-account:${identity}`).slice(0, 24);
}

function parseGenerate(body: unknown): { name?: string } {
	if (body === undefined || body === null) return {};
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const extra = Object.keys(body).find((k) => k !== "name");
	if (extra) throw badRequest(`${extra} is not allowed`);
	const { name } = body;
	if (name !== undefined && (typeof name !== "string" || !name.trim() || name.length > 200)) throw badRequest("name must be a non-empty string of at most 200 characters");
	return { name: name as string | undefined };
}

export async function generate(ctx: Ctx): Promise<{ data: Record<string, unknown> }> {
	const plan = requirePlan(ctx.locals);
	const { name } = parseGenerate(ctx.params.body);
	const svc = ctx.service as Svc;
	const store = svc.collectionStore("accounts");
	const token = plan.token;
	const identity = identityOf(token);
	const id = accountIdOf(identity);
	const existing = async (): Promise<{ data: Record<string, unknown> }> => {
		const doc = await store.findOne({ id });
		if (!doc) throw notFound();
		if (doc.deleted_at) throw conflict(`account ${id} is deleted: restore it with PUT /conjoint/accounts/${id}/restore`);
		// The caller's own account, but read through its view like any document (a narrower grant row hides it).
		const seen = await store.findOne(and([plan.filter, { id }]));
		if (!seen) throw notFound();
		return { data: present(ACCOUNTS, seen, plan.fields) };
	};
	if (await store.findOne({ id })) return existing();
	const doc: StoredDoc = platformDoc(
		{ name: name ?? identity, ...(token.uid ? { user: token.uid } : {}) },
		{ owner: identity, cid: token.cid, aid: token.aid, coworkers: token.coworker?.split(" ").filter(Boolean) },
	);
	doc.id = id;
	// Like a create: the new account must lie inside the caller's view (grant rows, zones).
	if (!matches(doc, plan.filter)) throw forbidden("document is outside the grant filter");
	try {
		await store.insert(doc);
	} catch (err) {
		if (!isDuplicateKeyError(err)) throw err;
		// PostgreSQL: the failed insert aborted this action's transaction (nothing else in it); it ends here, and the
		// first call's committed account is read in a new one (was a 500 on the concurrent first calls).
		await flushUnit();
		return existing();
	}
	await svc.recordChanges(ctx, "accounts", [{ op: "c", before: null, after: doc }]);
	return { data: present(ACCOUNTS, doc, plan.fields) };
}
