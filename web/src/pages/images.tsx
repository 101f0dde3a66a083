// Images: the built-in image this server serves (version and release notes), the component catalogue,
// the account's private images and the form that makes one. Each image's own page
// (images/image-page.tsx) shows its components, build and log. Kept current by image events.
import { useLoad, PageHeader } from '../ui/kit';
import { useRefreshOn } from '../ui/live';
import { ListView } from '../ui/paged-list';
import { BuiltinImage } from './images/builtin';
import { Catalogue } from './images/catalogue';
import { fetchCatalogue, fetchImages } from './images/data';
import { useWhileBuilding } from './images/image-page';
import { ImageTable } from './images/image-table';
import { NewImageForm } from './images/new-image';
export { ImagePage } from './images/image-page';

export function ImagesPage() {
  const images = useLoad(fetchImages, []);
  const catalogue = useLoad(fetchCatalogue, []);
  useRefreshOn('image', images.reload);
  useWhileBuilding(images.data ?? [], images.reload);
  const own = images.data?.filter((image) => !image.builtin);
  const list = { items: own, error: images.error, hasMore: false, loadingMore: false, loadMore: () => undefined };
  return (
    <section class="images-page">
      <PageHeader title="Images" />
      <p class="lead">
        Machines start from an image: the built-in universal one, or a private image of the components you choose. Pick
        one when you create a machine.
      </p>
      <BuiltinImage image={images.data?.find((image) => image.builtin)} />
      <h2>Your images</h2>
      <ListView list={list} empty="No private images yet." loadingLabel="Loading images…">
        {(items) => <ImageTable images={items} onDeleted={(gone) => images.set((images.data ?? []).filter((image) => image.id !== gone.id))} />}
      </ListView>
      {catalogue.data && <NewImageForm catalogue={catalogue.data} onCreated={images.reload} />}
      <Catalogue catalogue={catalogue} />
    </section>
  );
}
