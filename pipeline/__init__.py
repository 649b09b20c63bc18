"""Everything about data: the TFRecord schema, the Beam corpus builder, the tf.data reader."""
