/**
 * The authority decision at the moment of delivery: the one function every push path (live cursors and their resume,
 * MQTT delivery) asks before a document, or part of one, leaves for a client that is not making a request right now.
 *
 * It is the request path's own decision (checkScope, checkGrant, enforce of lib/authority.ts), taken again for each
 * change with the grant index of the moment: a grant deleted or narrowed, a role removed (the token's subjects as the
 * authenticator last resolved them) or a row filter changed applies to the next change, as it would to the next GET.
 * A document is delivered only when the caller's view (zones, row filter, the watcher's own query) admits it, and
 * only through the view's field list, exactly as a GET would present it.
 */
import { findCollection, type CollectionDef } from "../catalog";
import { ApiError } from "../lib/errors";
import type { Grant, GrantIndex } from "../lib/grants";
import type { AccessPlan } from "../lib/plan";
import { present } from "../lib/present";
import { RegexBudget, SafeRegExp } from "../lib/safe-regex";
import type { Doc, TokenClaims } from "../lib/types";
import type { CollectionActionMeta } from "../engine/collection.mixin";
import { matches } from "../lib/query";
import { checkGrant, checkScope, enforce } from "../lib/authority";

/** Who receives changes of one collection, and through which query (the live cursor's, or none for MQTT). */
export interface Watcher {
	token: TokenClaims;
	col: CollectionDef;
	meta: CollectionActionMeta;
	/** The watcher's query parameters as a cursor takes them (`query`, `zone`, `projection`), raw. */
	query: Record<string, unknown>;
	headers: Record<string, string>;
	ip?: string;
	/** The view of the last decision, reused while the grant index and the applicable grants are the same. */
	view?: { index: GrantIndex; policies: Grant[]; subject?: string; plan: AccessPlan };
}

/** A watcher of `service.collection` read as a cursor would read it (404 for a collection the catalog lacks). */
export function watcherOf(service: string, collection: string, token: TokenClaims, query: Record<string, unknown>, headers: Record<string, string> = {}, ip?: string): Watcher {
	const ref = findCollection(service, collection);
	if (!ref) throw new ApiError(404, "not found");
	return { token, col: ref.collection, meta: { service, collection, op: "cursor", level: "read" }, query, headers, ip };
}

const samePolicies = (a: Grant[], b: Grant[]) => a.length === b.length && a.every((g, i) => g === b[i]);

/** The watcher's view of its collection now; throws the authority layer's refusal (401/403/400) as a request would. */
export function viewAt(w: Watcher, index: GrantIndex): AccessPlan {
	const { token, meta } = w;
	checkScope(token, meta.level, meta.service, meta.collection);
	const decision = checkGrant(index, token, meta.level, `${meta.service}:${meta.collection}`, w.ip);
	const v = w.view;
	if (v && v.index === index && v.subject === token.subject && samePolicies(v.policies, decision.policies)) return v.plan;
	const plan = enforce({ query: w.query, headers: w.headers, ip: w.ip }, index, w.col, meta.op, decision, token);
	w.view = { index, policies: decision.policies, subject: token.subject, plan };
	return plan;
}

/** A change event's document image as the filter matcher and `present` take it: the stored form, `id` included. */
type Image = Record<string, unknown> & { id: string };
export const imageOf = (d: Doc | Record<string, unknown> | undefined): Image | undefined => d as Image | undefined;

/** The compiled `$regex` patterns of a view's filter (its query's and its grants' row filters'), found once per view. */
const patternsOf = new WeakMap<AccessPlan, SafeRegExp[]>();
function patterns(v: unknown, into: SafeRegExp[]): SafeRegExp[] {
	if (v instanceof SafeRegExp) into.push(v);
	else if (Array.isArray(v)) for (const x of v) patterns(x, into);
	else if (v && typeof v === "object" && !(v instanceof RegExp)) for (const x of Object.values(v)) patterns(x, into);
	return into;
}

/**
 * Whether the view admits this stored image (zones, row filter, the watcher's query). Each call is one evaluation of
 * the filter, with a work budget of its own for its patterns (lib/safe-regex.ts): a view outlives any number of
 * changes, and a budget it carried across them would refuse the next change once the earlier ones had spent it.
 */
export function admits(plan: AccessPlan, image: Image | undefined): boolean {
	if (!image) return false;
	let res = patternsOf.get(plan);
	if (!res) patternsOf.set(plan, (res = patterns(plan.filter, [])));
	if (res.length) {
		const budget = new RegexBudget();
		for (const re of res) re.budget = budget;
	}
	return matches(image, plan.filter);
}

/** What a change is for one watcher: the document entering, changing in, or leaving its view. */
export interface Delivery {
	op: "enter" | "update" | "leave";
	id: string;
	/** The document after the change, as a GET in this view presents it (absent for `leave`). */
	data?: Doc;
}

/** The watcher's view now; undefined when it may not read the collection any more (a 403: nothing of it is in view). */
export function viewOrNone(w: Watcher, index: GrantIndex): AccessPlan | undefined {
	try {
		return viewAt(w, index);
	} catch (err) {
		// Other errors (a limit) are the caller's.
		if ((err as { code?: unknown })?.code === 403) return undefined;
		throw err;
	}
}

/** Whether the watcher's view admits this image now (false without a view, see viewOrNone). */
export function admitsNow(w: Watcher, index: GrantIndex, image: Image | undefined): boolean {
	const plan = image && viewOrNone(w, index);
	return !!plan && admits(plan, image);
}

/**
 * The decision for a document's changes over a span of the change stream taken as one (a catch-up from a past
 * position), for a document the view admitted in at least one of its images of the span: `was` whether it admitted
 * the document at the span's start, `now` the document's image at the span's end. In view now: `enter` (`update` when
 * it was in view at the start) with the document as a GET presents it, never an earlier state; out of view now (or
 * gone): `leave` without data. Undefined when the watcher may not read the collection any more.
 */
export function decideSpan(w: Watcher, index: GrantIndex, id: string, was: boolean, now: Image | undefined): Delivery | undefined {
	const plan = viewOrNone(w, index);
	if (!plan) return undefined;
	if (!admits(plan, now)) return { op: "leave", id };
	return { op: was ? "update" : "enter", id, data: present(w.col, now!, plan.fields) };
}

/**
 * The decision for one change (stored images before and after): undefined when the document is in neither image of
 * the view, or when the watcher may not read the collection any more (scope, grant, location, time: a 403). A `leave`
 * carries no data: the caller never sees a state its view no longer admits. Any other error (a query limit met while
 * matching) is thrown: the caller ends the stream with it rather than drop changes silently.
 */
export function decideChange(w: Watcher, index: GrantIndex, id: string, before: Image | undefined, after: Image | undefined): Delivery | undefined {
	const plan = viewOrNone(w, index);
	if (!plan) return undefined;
	const was = admits(plan, before);
	const is = admits(plan, after);
	if (!was && !is) return undefined;
	if (!is) return { op: "leave", id };
	return { op: was ? "update" : "enter", id, data: present(w.col, after!, plan.fields) };
}
