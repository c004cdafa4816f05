/** The catalog's vocabulary: every domain, collection, field and special action is data of these types. */

export type FieldType = "string" | "number" | "integer" | "boolean" | "object" | "array" | "date" | "any";

export type FieldFormat = "email" | "e164" | "semver" | "uri" | "uuid" | "hex" | "objectId" | "ip-or-cidr" | "cron" | "group";

export interface FieldDef {
	type: FieldType;
	/** Element type of an array. */
	items?: FieldType;
	/** Element format of an array, or the value format of a string. */
	format?: FieldFormat;
	required?: boolean;
	/** Required only on a raw create (e.g. saga fields that `start` manages itself). */
	enum?: readonly string[];
	/** Accepted on write, never returned, never in change events (pushes.keys, users.password, ...). */
	writeOnly?: boolean;
	/** Kept by the platform for its own use: never settable by a caller, never returned (hashes, internal keys). */
	internal?: boolean;
	/** Set by the platform, returned like any field, never settable by a caller (400 in a body): saga `expires_at`. */
	readOnly?: boolean;
	/** Populatable relation: `service/collection` of the target. */
	relation?: string;
	/** Holds file ids (special/files) that are deliberately not populatable. */
	fileRef?: boolean;
	maxLength?: number;
	minimum?: number;
	description?: string;
	/** A typical value, shown in the OpenAPI document (catalog/field-docs.ts fills most of them). */
	example?: unknown;
}

export interface RuleDef {
	/** At least one of these fields must be present in the resulting document. */
	anyOf: readonly string[];
	message: string;
}

export interface SpecialDef {
	/** Action name, also the first part of its scope: `send` -> `send:touch:emails`. */
	action: string;
	method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
	/** Path below the collection, e.g. `send`, `:id/abort`. */
	path: string;
	/**
	 * The Moleculer action's suffix (`<service>.<collection>.<name>`) when the path is not one: a path with a parameter
	 * beyond `:id` (`:id/deliveries/:delivery/redeliver` -> `redeliver`).
	 */
	name?: string;
	description: string;
	/**
	 * Built: the gateway routes it and the OpenAPI document describes it. A special without a handler yet stays
	 * unrouted (404 like any unknown path); the handler lives beside the domain's hooks (services/<domain>/*.ts).
	 */
	implemented?: boolean;
	/** Request body fields (OpenAPI and the handler's validation). */
	body?: Record<string, FieldDef>;
	/**
	 * Query parameters of their own (OpenAPI), e.g. search's `q`; `listParams` adds the list's `query`, `pagination`,
	 * `zone` and `x-zone` (the caller's view of the collection, narrowed like a list).
	 */
	query?: Record<string, FieldDef>;
	listParams?: boolean;
	/**
	 * What the answer holds: one document of this collection (`data`), or of another (`data:<service>/<collection>`),
	 * a page of this collection's documents (`items`: `{ items, total }`), such a page under `data` (`data-items`), or an object made of `answerFields`
	 * (`data:object`, `items:object`), or a page of such objects newest first (`page:object`: `{ items, next }`, `next`
	 * the `before` of the next page).
	 */
	answer?: string;
	/** With `data`/`items`: fields each answered document carries beyond the collection's (`score`, `distance`); with `*:object`: the object's fields. */
	answerFields?: Record<string, FieldDef>;
	/** The body is multipart/form-data with `file` parts (binary) and the `body` fields as form fields. */
	multipart?: boolean;
	/** Error statuses the special may answer beyond 400/401/403 (OpenAPI). */
	errors?: readonly number[];
}

/** Moleculer action suffix of a special: its `name`, else its path without the `:id/` prefix (`:id/abort` -> `abort`). */
export function specialName(s: SpecialDef): string {
	return s.name ?? s.path.replace(/^:id\//, "");
}

export interface CollectionDef {
	/** Path segment, e.g. `saga-stages`. */
	name: string;
	description: string;
	fields: Record<string, FieldDef>;
	rules?: readonly RuleDef[];
	specials?: readonly SpecialDef[];
	/** Written only by the platform (e.g. push-histories): create/bulk/patch through the API answer 405. */
	platformWritten?: boolean;
}

export interface DomainDef {
	name: string;
	restPort: number;
	grpcPort: number;
	description: string;
	collections: readonly CollectionDef[];
}

/** The 11 operations of the standard pattern, with the scope level each needs. */
export const STANDARD_OPS = {
	count: "read",
	create: "write",
	bulkCreate: "write",
	list: "read",
	cursor: "read",
	get: "read",
	patch: "write",
	bulkPatch: "manage",
	remove: "write",
	restore: "write",
	destroy: "manage",
} as const;

export type StandardOp = keyof typeof STANDARD_OPS;
export type ScopeLevel = (typeof STANDARD_OPS)[StandardOp];
