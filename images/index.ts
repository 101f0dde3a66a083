// The image pipeline's library API, for the service (build at start, in the background) and tests.
export {
  buildImage,
  buildPrerequisitesMissing,
  contentHash,
  imageVersion,
  manifestDiskMib,
  readLatest,
  readLatestImage,
  readManifest,
  recipeHash,
  IMAGE_FILES,
  type BuildImageOptions,
  type BuildProgress,
  type BuildStepName,
  type BuiltImage,
  type ImageManifest,
  type LatestEntry,
} from './build-image';
export {
  checkComponentRecipes,
  componentsOfImage,
  packageMap,
  COMPONENT_RECIPES,
  imageOs,
  majorVersion,
  releaseNotes,
  upstreamVersion,
  type BuiltComponent,
  type ComponentCategory,
  type ComponentRecipe,
  type ComponentResources,
} from './components';
export { AGENT_GUEST_PATH, AGENT_PORT_NAME, IMAGE_INFO_GUEST_PATH } from './profiles/base';
export { getProfile, PROFILES, type Profile } from './profiles';
export { DEFAULT_AGENT_BUNDLE, defaultImageDir } from './build';
export { pruneImageVersions, type PruneOptions } from './prune';
