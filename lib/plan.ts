/**
 * The access plan: what the authority middleware decided for one collection call, and the only input from which
 * the collection engine reads or writes. A collection action without a plan answers 502.
 */
import type { TokenClaims } from "./types";
import type { Filter } from "../catalog/store";
import type { PopulateSpec } from "./query-safety";
import { ApiError } from "./errors";

export interface AccessPlan {
	/** Complete read condition: soft delete ∧ zones ∧ grant rows ∧ caller query ∧ id/ref. */
	filter: Filter;
	/** Readable and writable fields; null = all. */
	fields: string[] | null;
	sort?: Record<string, 1 | -1>;
	skip: number;
	limit: number;
	projection?: Record<string, 0 | 1>;
	populate: PopulateSpec[];
	token: TokenClaims;
	/** Create, bulk create, patch, bulk patch: the grant's row filter every written document must satisfy. */
	writeFilter?: Filter;
}

export function requirePlan(locals: Record<string, unknown> | undefined): AccessPlan {
	const plan = locals?.plan as AccessPlan | undefined;
	if (!plan) throw new ApiError(502, "authorization layers were not applied");
	return plan;
}
