-- AlterTable
ALTER TABLE "Worker" ADD COLUMN     "placeableUntil" TIMESTAMP(3);
