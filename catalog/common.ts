/** Fields every document carries (spec "Common fields"), split as docs/contracts.md "Fields and bodies" says. */
import type { FieldDef } from "./types";

/** Set only by the platform; a body that sends one answers 400 naming the field. */
export const PLATFORM_FIELDS: Record<string, FieldDef> = {
	id: { type: "string", format: "objectId", description: "Document identifier (24-hex object id)" },
	owner: { type: "string", description: "Id of the owning user, app or client" },
	clients: { type: "array", items: "string", description: "OAuth clients (and coworkers) that see the document" },
	created_at: { type: "date" },
	created_by: { type: "string" },
	created_in: { type: "string" },
	updated_at: { type: "date" },
	updated_by: { type: "string" },
	updated_in: { type: "string" },
	deleted_at: { type: "date", description: "null while the document is live" },
	deleted_by: { type: "string" },
	deleted_in: { type: "string" },
	restored_at: { type: "date" },
	restored_by: { type: "string" },
	restored_in: { type: "string" },
	rand: { type: "string" },
	timestamp: { type: "string" },
};

/** Settable by the caller on create and patch, on every collection. */
export const SETTABLE_FIELDS: Record<string, FieldDef> = {
	ref: { type: "string", maxLength: 200, description: "Unique human-readable reference" },
	shares: { type: "array", items: "string", description: "Ids of users with shared access" },
	groups: { type: "array", items: "string", format: "group", description: "Email or FQDN list for group access" },
	identity: { type: "string", description: "Polymorphic single-relation field" },
	relations: { type: "array", items: "string", description: "Polymorphic multi-relation field" },
	description: { type: "string", maxLength: 10000, description: "Searchable text summary" },
	version: { type: "string", format: "semver", description: "Document version (SemVer), default 1.0.0" },
	tags: { type: "array", items: "string", description: "Free-form tags" },
	props: { type: "object", description: "Free-form extra properties" },
};

export const DEFAULT_VERSION = "1.0.0";
