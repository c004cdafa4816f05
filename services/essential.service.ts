/** essential: the standard collection pattern on every collection of the domain (catalog/domains/essential.ts). */
import type { ServiceSchema } from "moleculer";
import { essential } from "../catalog/domains/essential";
import { collectionMixin } from "../mixins/collection.mixin";

const EssentialService: ServiceSchema = { name: "essential", mixins: [collectionMixin(essential)] };

export default EssentialService;
