/** The catalog's vocabulary: every domain, collection, field and special action is data of these types. */

export type FieldType = "string" | "number" | "integer" | "boolean" | "object" | "array" | "date" | "any";

export type FieldFormat = "email" | "e164" | "semver" | "uri" | "uuid" | "hex" | "objectId" | "ip-or-cidr" | "cron";

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
	/** Set by the platform only (a body naming it answers 400), returned and queryable like any field (delivery state). */
	platformSet?: boolean;
	/** Populatable relation: `service/collection` of the target. */
	relation?: string;
	/** Holds file ids (special/files) that are deliberately not populatable. */
	fileRef?: boolean;
	maxLength?: number;
	minimum?: number;
	description?: string;
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
	description: string;
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
