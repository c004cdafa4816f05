import type { DomainDef } from "../types";

export const special: DomainDef = {
	name: "special",
	restPort: 3090,
	grpcPort: 5090,
	description: "File metadata and aggregated statistics",
	collections: [
		{
			name: "files",
			description: "File metadata; the content is stored outside the document store",
			fields: {
				name: { type: "string", required: true, maxLength: 500 },
				mimetype: { type: "string", maxLength: 200, readOnly: true, description: "Sniffed from the content at upload (docs/files.md)" },
				size: { type: "integer", minimum: 0, readOnly: true, description: "Bytes of content" },
				sha256: { type: "string", format: "hex", readOnly: true, description: "SHA-256 of the content (hex); the download's etag" },
				storage: { type: "string", internal: true, description: "Internal storage key" },
				share_keys: { type: "array", items: "object", internal: true, description: "Share keys: SHA-256 hashes with their expiry" },
			},
			specials: [
				{
					action: "upload",
					method: "POST",
					path: "upload",
					description: "Upload file content (multipart/form-data: one or more `file` parts; a `name` field names the file part after it)",
					implemented: true,
					multipart: true,
					body: { name: { type: "string", maxLength: 500, description: "Name of the next file part (default: its filename)" } },
					answer: "items",
					errors: [413, 415],
				},
				{
					action: "share",
					method: "POST",
					path: ":id/share",
					description: "A download path that works without a token until it expires; `{ type: \"UNLINK\" }` revokes every share key of the file",
					implemented: true,
					body: {
						ttl: { type: "integer", minimum: 1, description: "Seconds the key works (default 3600, at most 2592000 = 30 days)" },
						type: { type: "string", enum: ["UNLINK"], description: "Revoke every share key of the file instead" },
					},
					answerFields: {
						path: { type: "string", description: "Download path with the key (`/special/files/<id>/download?key=...`)" },
						key: { type: "string", description: "The share key (shown once; stored hashed)" },
						expires_at: { type: "date" },
						revoked: { type: "integer", description: "UNLINK: share keys revoked" },
					},
					errors: [404],
				},
			],
		},
		{
			name: "stats",
			description: "Aggregated create/update/delete counters, written by the observer",
			platformWritten: true,
			fields: {
				service: { type: "string" },
				collection: { type: "string" },
				period: { type: "string", enum: ["daily", "monthly", "yearly"] },
				bucket: { type: "string" },
				created: { type: "integer" },
				updated: { type: "integer" },
				deleted: { type: "integer" },
				restored: { type: "integer" },
				seqs: { type: "array", items: "integer", internal: true, description: "Stream positions of the latest change events counted (redelivery guard)" },
			},
			specials: [{ action: "collect", method: "POST", path: "collect", description: "Collect statistics" }],
		},
	],
};
