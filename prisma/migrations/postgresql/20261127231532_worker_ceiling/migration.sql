-- AlterTable
ALTER TABLE "Worker" ADD COLUMN     "maxDiskMib" INTEGER,
ADD COLUMN     "maxMemoryMib" INTEGER,
ADD COLUMN     "maxVcpu" INTEGER;
