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
				mimetype: { type: "string", maxLength: 200 },
				size: { type: "integer", minimum: 0 },
				storage: { type: "string", internal: true, description: "Internal storage key" },
			},
			specials: [
				{ action: "upload", method: "POST", path: "upload", description: "Upload file content" },
				{ action: "share", method: "POST", path: ":id/share", description: "Share a file" },
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
			specials: [
				{
					action: "collect", method: "POST", path: "collect", implemented: true,
					description: "The caller's tenant's statistics (its client's) summed per service and collection over the buckets of `period` from `from` to `to` (inclusive, either may be omitted), read through the caller's view (a user token reads them with `zone=client`)",
					listParams: true,
					body: {
						period: { type: "string", required: true, enum: ["daily", "monthly", "yearly"] },
						service: { type: "string", description: "Only this service" },
						collection: { type: "string", description: "Only this collection" },
						from: { type: "string", description: "First bucket: a date (YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601), taken as its bucket of `period`" },
						to: { type: "string", description: "Last bucket, like `from`" },
					},
					answer: "items:object",
					answerFields: {
						service: { type: "string" },
						collection: { type: "string" },
						period: { type: "string" },
						from: { type: "string", description: "First bucket counted" },
						to: { type: "string", description: "Last bucket counted" },
						created: { type: "integer" },
						updated: { type: "integer" },
						deleted: { type: "integer" },
						restored: { type: "integer" },
					},
				},
			],
		},
	],
};
